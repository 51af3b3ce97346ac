// Reads and replaces the backend constructor of a ggml device. Compiled against ggml's own
// ggml-backend-impl.h from the llama.cpp tree that was built (see build.rs), so the compiler,
// not a copy of the struct, knows where the constructor lives in the device. Built with
// -Werror=incompatible-pointer-types: a changed constructor signature fails the build.

#include "ggml-backend-impl.h"

typedef ggml_backend_t (*medusa_init_backend_t)(ggml_backend_dev_t dev, const char * params);

medusa_init_backend_t medusa_exact_get_init_backend(ggml_backend_dev_t dev) {
    return dev->iface.init_backend;
}

void medusa_exact_set_init_backend(ggml_backend_dev_t dev, medusa_init_backend_t init_backend) {
    dev->iface.init_backend = init_backend;
}
