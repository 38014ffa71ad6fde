#include <tapegrad/version.h>

namespace tapegrad {

// Note: the string is compiled into the library, so it tells which library is loaded, not which headers.
const char* version() noexcept { return TAPEGRAD_VERSION_STRING; }

}  // namespace tapegrad
