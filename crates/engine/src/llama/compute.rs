//! Where a model runs: the backend its layers went to, the devices llama.cpp found, and how many
//! layers are on a GPU.

use llama_cpp_2::{list_llama_ggml_backend_devices, LlamaBackendDeviceType};
use serde::Serialize;
use ts_rs::TS;

/// The compute behind a loaded model.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct ComputeInfo {
    /// "CPU", or the backend the offloaded layers went to ("CUDA", "Vulkan", "Metal").
    pub backend: String,
    /// Every device this build of llama.cpp found, the CPU included.
    pub devices: Vec<ComputeDevice>,
    /// Layers on a GPU, of `total_layers` (the repeating layers and the output layer).
    pub gpu_layers: u32,
    pub total_layers: u32,
    /// In words: "CUDA, 31 of 31 layers on NVIDIA H100" or "CPU (no GPU found)".
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct ComputeDevice {
    /// e.g. "CUDA0".
    pub name: String,
    /// e.g. "NVIDIA H100 80GB HBM3".
    pub description: String,
    pub backend: String,
    /// `cpu`, `gpu`, `igpu` (integrated), `accelerator` or `unknown`.
    pub kind: String,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
}

impl ComputeDevice {
    fn is_gpu(&self) -> bool {
        self.kind == "gpu" || self.kind == "igpu"
    }
}

impl ComputeInfo {
    /// What llama.cpp does with `requested` GPU layers of a model with `n_layer` repeating
    /// layers, given the devices found and whether this build can offload at all.
    pub(crate) fn new(
        devices: Vec<ComputeDevice>,
        can_offload: bool,
        requested: u32,
        n_layer: u32,
    ) -> Self {
        let total_layers = n_layer + 1;
        let gpu = devices.iter().find(|d| d.is_gpu()).filter(|_| can_offload);
        let gpu_layers = gpu.map_or(0, |_| requested.min(total_layers));
        let backend = match gpu {
            Some(device) if gpu_layers > 0 => device.backend.clone(),
            _ => "CPU".to_owned(),
        };
        let summary = match devices.iter().find(|d| d.is_gpu()) {
            Some(gpu) if gpu_layers > 0 => format!(
                "{backend}, {gpu_layers} of {total_layers} layers on {}",
                gpu.description
            ),
            Some(gpu) => format!("CPU ({} found, no layers offloaded)", gpu.description),
            None => "CPU (no GPU found)".to_owned(),
        };
        Self {
            backend,
            devices,
            gpu_layers,
            total_layers,
            summary,
        }
    }

    /// This machine's devices, as the loaded llama.cpp build sees them.
    pub(crate) fn detect(requested: u32, n_layer: u32) -> Self {
        let devices = list_llama_ggml_backend_devices()
            .into_iter()
            .map(|d| ComputeDevice {
                kind: match d.device_type {
                    LlamaBackendDeviceType::Cpu => "cpu",
                    LlamaBackendDeviceType::Gpu => "gpu",
                    LlamaBackendDeviceType::IntegratedGpu => "igpu",
                    LlamaBackendDeviceType::Accelerator => "accelerator",
                    LlamaBackendDeviceType::Unknown => "unknown",
                }
                .to_owned(),
                name: d.name,
                description: d.description,
                backend: d.backend,
                memory_total_bytes: d.memory_total as u64,
                memory_free_bytes: d.memory_free as u64,
            })
            .collect();
        // SAFETY: a plain query of the linked llama.cpp build.
        let can_offload = unsafe { llama_cpp_sys_2::llama_supports_gpu_offload() };
        Self::new(devices, can_offload, requested, n_layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(kind: &str, backend: &str, description: &str) -> ComputeDevice {
        ComputeDevice {
            name: format!("{backend}0"),
            description: description.into(),
            backend: backend.into(),
            kind: kind.into(),
            memory_total_bytes: 0,
            memory_free_bytes: 0,
        }
    }

    #[test]
    fn layers_go_to_the_first_gpu_when_the_build_can_offload() {
        let devices = vec![device("cpu", "CPU", "EPYC"), device("gpu", "CUDA", "H100")];
        let all = ComputeInfo::new(devices.clone(), true, 999, 30);
        assert_eq!(
            (all.backend.as_str(), all.gpu_layers, all.total_layers),
            ("CUDA", 31, 31)
        );
        assert_eq!(all.summary, "CUDA, 31 of 31 layers on H100");
        let some = ComputeInfo::new(devices.clone(), true, 10, 30);
        assert_eq!(some.gpu_layers, 10);
        let none = ComputeInfo::new(devices, true, 0, 30);
        assert_eq!((none.backend.as_str(), none.gpu_layers), ("CPU", 0));
        assert_eq!(none.summary, "CPU (H100 found, no layers offloaded)");
    }

    #[test]
    fn a_cpu_build_runs_on_the_cpu() {
        let cpu_only = ComputeInfo::new(vec![device("cpu", "CPU", "EPYC")], false, 999, 30);
        assert_eq!((cpu_only.backend.as_str(), cpu_only.gpu_layers), ("CPU", 0));
        assert_eq!(cpu_only.summary, "CPU (no GPU found)");
        let no_offload = ComputeInfo::new(vec![device("gpu", "Vulkan", "iGPU")], false, 999, 30);
        assert_eq!(no_offload.gpu_layers, 0);
    }
}
