#pragma once
/// Reading the calling thread's tape, for tools that check what a piece of code recorded (the testing kit).
#include <tapegrad/export.h>
#include <string>
#include <vector>

TAPEGRAD_API_BEGIN

namespace tapegrad::autograd {

/// The op names of the records on the calling thread's tape that no live tensor can reach any more (those
/// prune_tape() would drop), oldest first: work recorded whose result nothing uses, so no gradient can reach it.
/// Note: the records keep no shapes (their outputs are gone), only the op names.
std::vector<std::string> unreachable_record_ops();

}  // namespace tapegrad::autograd

TAPEGRAD_API_END
