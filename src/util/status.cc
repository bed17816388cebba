// Status helpers.
#include "util/status.h"

namespace chorus {

Status Status::Context(const std::string& prefix) const {
  if (ok()) return *this;
  Status s;
  s.message_ = prefix + ": " + message_;
  return s;
}

}  // namespace chorus
