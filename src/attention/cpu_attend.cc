// Placeholder until the blocked SIMD kernel lands: delegates to the reference.
#include "attention/attend.h"

namespace kvshare::detail {
void AttendOptimized(const AttendParams& p, ThreadPool*) { AttendReference(p); }
}  // namespace kvshare::detail
