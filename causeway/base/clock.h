// An injectable clock. Everything in Causeway that reads time goes through a
// Clock so tests can substitute a fake one.
#ifndef CAUSEWAY_BASE_CLOCK_H_
#define CAUSEWAY_BASE_CLOCK_H_

#include <cstdint>

namespace causeway {

// Thread-safe. Implementations must be monotonic.
class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since an arbitrary, fixed epoch.
  virtual int64_t NowMicros() const = 0;
  // Nanoseconds since the same epoch.
  virtual int64_t NowNanos() const = 0;

  // The process-wide monotonic real-time clock. Never null, never destroyed.
  static Clock* Real();
};

}  // namespace causeway

#endif  // CAUSEWAY_BASE_CLOCK_H_
