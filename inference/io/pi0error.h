// pi0::Error: the one exception type that inference/ throws for bad input (files, names,
// shapes, prompts). Callers at a GObject boundary catch it (and c10::Error / std::exception)
// and turn what() into a GST_ELEMENT_ERROR; the message is written to be shown as is.
#pragma once

#include <stdexcept>

namespace pi0
{

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace pi0
