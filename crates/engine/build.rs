//! Compiles csrc/exact_kernels.c against ggml's private ggml-backend-impl.h, taken from the
//! llama.cpp tree that llama-cpp-sys-2 compiled, so that the header matches the library linked.
//! Without that tree the build goes on and exact mode reports itself unavailable.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const SHIM: &str = "csrc/exact_kernels.c";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(exact_kernels)");
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_GGML_CMAKE_DIR");
    match ggml_source_dir() {
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

/// The ggml source directory CMake built, read from the CMake cache of llama-cpp-sys-2. That
/// crate (`links = "llama"`) exports where it installed ggml's CMake package, `<out>/lib/cmake`
/// (or `lib64`), and configures CMake in `<out>/build`.
fn ggml_source_dir() -> Result<PathBuf, String> {
    let cmake_dir = env::var_os("DEP_LLAMA_GGML_CMAKE_DIR")
        .ok_or("llama-cpp-sys-2 did not export DEP_LLAMA_GGML_CMAKE_DIR")?;
    let out = Path::new(&cmake_dir).ancestors().nth(2).ok_or_else(|| {
        format!(
            "unexpected ggml CMake dir {}",
            Path::new(&cmake_dir).display()
        )
    })?;
    let cache = out.join("build/CMakeCache.txt");
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
