// A pointwise kernel that writes its result into the input it replaces (a key/value cache
// written one slot a step: cache = where(slot == pos, new, cache)) need not read the input nor
// write the elements it keeps. store_only_changes rewrites such a kernel's store of
// where(c, a, input[i]) (through copies) into a store of a where c holds: the kernel then moves
// the changed elements only, not the whole buffer twice.
#pragma once
#include "compiler/kernel_ir.h"

namespace ember::compiler {

// Rewrites k, an elementwise kernel whose output buffer is the memory of its input buffer
// `target` (read at the output's own index), as above; false (k unchanged) where its stored
// value is not such a where. The rewritten kernel is correct only while the output is that
// input: a caller that cannot write in place must not run it.
bool store_only_changes(kir::Kernel& k, int target);

}  // namespace ember::compiler
