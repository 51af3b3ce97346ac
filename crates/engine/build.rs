//! Compiles csrc/exact_kernels.c against ggml's private ggml-backend-impl.h, taken from the
//! llama.cpp tree that llama-cpp-sys-2 compiled, so that the header matches the library linked.
//! Without that tree the build goes on and exact mode reports itself unavailable.
//!
//! Also checks that the llama.cpp build applied this repository's kernel patch
//! (patches/ggml, applied through .cargo/config.toml): the Rust side calls into it only then.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const SHIM: &str = "csrc/exact_kernels.c";
const KERNEL_PATCH: &str = "../../patches/ggml/batched-verification.patch";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(exact_kernels)");
    println!("cargo::rustc-check-cfg=cfg(batched_kernels)");
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-changed={KERNEL_PATCH}");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_GGML_CMAKE_DIR");
    println!("cargo:rerun-if-env-changed=CMAKE_PROJECT_ggml_INCLUDE");
    let build = llama_build_dir();
    check_kernel_patch(build.as_deref());
    match build.and_then(|build| ggml_source_dir(&build)) {
        Ok(ggml) => {
            let header = ggml.join("src/ggml-backend-impl.h");
            println!("cargo:rerun-if-changed={}", header.display());
            cc::Build::new()
                .file(SHIM)
                .include(ggml.join("include"))
                .include(ggml.join("src"))
                .flag_if_supported("-Werror=incompatible-pointer-types")
                .compile("medusa_exact_kernels");
            println!("cargo:rustc-cfg=exact_kernels");
        }
        Err(why) => {
            println!("cargo:warning=exact mode is unavailable in this build: {why}");
            println!("cargo:rustc-env=MEDUSA_EXACT_KERNELS_UNAVAILABLE={why}");
        }
    }
}

/// Where llama-cpp-sys-2 configured CMake. That crate (`links = "llama"`) exports where it
/// installed ggml's CMake package, `<out>/lib/cmake` (or `lib64`), and configures in `<out>/build`.
fn llama_build_dir() -> Result<PathBuf, String> {
    let cmake_dir = env::var_os("DEP_LLAMA_GGML_CMAKE_DIR")
        .ok_or("llama-cpp-sys-2 did not export DEP_LLAMA_GGML_CMAKE_DIR")?;
    let out = Path::new(&cmake_dir).ancestors().nth(2).ok_or_else(|| {
        format!(
            "unexpected ggml CMake dir {}",
            Path::new(&cmake_dir).display()
        )
    })?;
    Ok(out.join("build"))
}

/// Turns the batched kernels on when llama.cpp was built with this repository's patch as it is
/// now. A build that applied an older version of it, or that was asked to apply it and did not
/// (llama.cpp built before the patch existed), stops here with what to do.
fn check_kernel_patch(build: Result<&Path, &String>) {
    let asked = env::var_os("CMAKE_PROJECT_ggml_INCLUDE").is_some();
    let applied = build.map(|build| build.join("medusa-patched/applied.patch"));
    if let Ok(applied) = &applied {
        println!("cargo:rerun-if-changed={}", applied.display());
    }
    let ours = fs::read(KERNEL_PATCH).unwrap_or_else(|e| panic!("cannot read {KERNEL_PATCH}: {e}"));
    match applied.map(fs::read) {
        Ok(Ok(built)) if built == ours => println!("cargo:rustc-cfg=batched_kernels"),
        Ok(Ok(_)) => panic!(
            "llama.cpp was built with another version of {KERNEL_PATCH}: \
             run `cargo clean -p llama-cpp-sys-2` and build again"
        ),
        _ if asked => panic!(
            "llama.cpp was built without {KERNEL_PATCH} (built before it was added?): \
             run `cargo clean -p llama-cpp-sys-2` and build again"
        ),
        _ => println!(
            "cargo:warning=llama.cpp was built without {KERNEL_PATCH}: stock CPU kernels only"
        ),
    }
}

/// The ggml source directory CMake built, read from the CMake cache of llama-cpp-sys-2.
fn ggml_source_dir(build: &Path) -> Result<PathBuf, String> {
    let cache = build.join("CMakeCache.txt");
    println!("cargo:rerun-if-changed={}", cache.display());
    let text =
        fs::read_to_string(&cache).map_err(|e| format!("cannot read {}: {e}", cache.display()))?;
    let ggml = text
        .lines()
        .find_map(|line| line.strip_prefix("ggml_SOURCE_DIR:STATIC="))
        .map(PathBuf::from)
        .ok_or_else(|| format!("no ggml_SOURCE_DIR in {}", cache.display()))?;
    let header = ggml.join("src/ggml-backend-impl.h");
    if !header.is_file() {
        return Err(format!("{} not found", header.display()));
    }
    Ok(ggml)
}
