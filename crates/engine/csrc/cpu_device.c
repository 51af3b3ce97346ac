// Reads and replaces two entry points of ggml's CPU device: its backend constructor (exact
// kernels, see exact_kernels.rs) and its registry's function lookup (the thread cap, see
// thread_cap.rs). Compiled against ggml's own ggml-backend-impl.h from the llama.cpp tree that
// was built (see build.rs), so the compiler, not a copy of the structs, knows where they live.
// Built with -Werror=incompatible-pointer-types: a changed signature fails the build.

#include "ggml-backend-impl.h"

typedef ggml_backend_t (*medusa_init_backend_t)(ggml_backend_dev_t dev, const char * params);
typedef void * (*medusa_get_proc_address_t)(ggml_backend_reg_t reg, const char * name);

medusa_init_backend_t medusa_exact_get_init_backend(ggml_backend_dev_t dev) {
    return dev->iface.init_backend;
}

void medusa_exact_set_init_backend(ggml_backend_dev_t dev, medusa_init_backend_t init_backend) {
    dev->iface.init_backend = init_backend;
}

medusa_get_proc_address_t medusa_reg_get_proc_address(ggml_backend_reg_t reg) {
    return reg->iface.get_proc_address;
}

void medusa_reg_set_proc_address(ggml_backend_reg_t reg, medusa_get_proc_address_t get_proc_address) {
    reg->iface.get_proc_address = get_proc_address;
}
