// Grad mode: a thread-local switch, on by default.
#include "ember/autograd.h"

namespace ember {

namespace {
thread_local bool tls_grad_enabled = true;
}

bool is_grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool on) { tls_grad_enabled = on; }

}  // namespace ember
