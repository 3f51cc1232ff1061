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
  c.host.client_run_us = 2.97;
  c.host.client_send_us = 3.06;
  c.host.scheduler_run_us = 1.07;
  c.host.scheduler_report_us = 1.07;
  c.host.host_run_us = 0.00;
  c.host.host_launch_us = 0.68;
  c.host.device_launch_us = 1.76;
  c.host.collective_member_us = 6.24;
  c.host.collective_member_slope_us = 1.82;
  c.host.handoff_us = 13.27;
  c.host.message_us = 50.27;
  c.host.transfer_us = 50.27;
  c.ici = LinkCosts{0.00, 27.6};
  c.dcn = LinkCosts{0.00, 2.53};
  c.device = DeviceCosts{106.3, 40.8, 98.8};
  return c;
}

}  // namespace causeway::sim
