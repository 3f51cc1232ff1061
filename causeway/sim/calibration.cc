// This machine's costs for the simulator (SimCosts), as measured by
//
//   build/release/bin/causeway sim calibrate --json > docs/sim_calibration.json
//
// on the 2-core development machine; docs/SIM.md, "Calibration", says how
// each figure is measured.
#include "causeway/sim/sim_cluster.h"

namespace causeway::sim {

SimCosts CalibratedCosts() {
  SimCosts c;
  c.host.client_run_us = 2.76;
  c.host.client_send_us = 1.81;
  c.host.scheduler_run_us = 3.05;
  c.host.scheduler_report_us = 0.72;
  c.host.host_run_us = 0.00;
  c.host.host_launch_us = 0.87;
  c.host.device_launch_us = 1.91;
  c.host.collective_member_us = 14.02;
  c.host.collective_member_slope_us = 1.54;
  c.host.handoff_us = 3.63;
  c.host.message_us = 55.31;
  c.host.transfer_us = 55.31;
  c.ici = LinkCosts{0.00, 19.3};
  c.dcn = LinkCosts{0.00, 2.79};
  c.device = DeviceCosts{103.6, 43.8, 49.4};
  return c;
}

}  // namespace causeway::sim
