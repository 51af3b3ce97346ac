//! Loading a model on the engine's thread: the model and its context sized for the requests and
//! trees they decode, the heads and their plan, the model's information; then the thread serves
//! the scheduler until the handle goes away.

use std::cell::RefCell;
use std::num::NonZeroU32;
use std::sync::{mpsc as std_mpsc, Arc};

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::config::{EngineConfig, LoadStage, DEFAULT_CTX_SIZE};
use crate::cost_cache::{CostCache, CostKey};
use crate::engine_metrics::Shared;
use crate::error::EngineError;
use crate::feature_drafter::{EagleDrafter, FeatureDrafterModel};
use crate::info::{DraftModelInfo, EagleInfo, ModelInfo};
use crate::llama::compute::ComputeInfo;
use crate::llama::draft_model::{DraftModel, VocabSummary};
use crate::llama::runtime::{LlamaRuntime, RuntimeSettings};
use crate::llama_process::{backend, clear_recent_errors, take_recent_errors};
use crate::medusa::heads::{BaseIdentity, MedusaHeads};
use crate::medusa::plan::plan_tree;
use crate::request::MAX_DRAFT_TOKENS;
use crate::sampling::defaults::SamplingDefaults;
use crate::scheduler::{Command, Scheduler};
use crate::speculative::drafter_kind::DrafterKind;
use crate::speculative::model_drafter::{Agreement, DraftModelDrafter};
use crate::speculative::outlook::WidenedCosts;
use crate::speculative::tree::TreeSpec;
use crate::step::batcher::Batcher;
use crate::step::decoder::Decoder;
use crate::step::drafter_pool::{eagle_prior, DrafterPool, MedusaSetup};
use crate::step::kv_ledger::SequenceIds;
use crate::weights::model_file;
use crate::weights::quantize::file_type_name;

/// The batch a context is created with: `batch_size` (how much of a prompt one decode takes), or
/// more when it must. A decode holds a whole draft tree and a root per request; and llama.cpp
/// reserves an output for every sequence id at creation, aborting the process (not failing)
/// when the batch has fewer outputs than that, which `--batch-size 32` did.
pub(crate) fn batch_capacity(batch_size: u32, parallel: usize, n_seq_max: usize) -> u32 {
    let min_batch = (MAX_DRAFT_TOKENS + parallel).max(n_seq_max);
    batch_size.max(u32::try_from(min_batch).unwrap_or(u32::MAX))
}

/// What the engine thread hands back once the model is ready.
pub(crate) struct Loaded {
    pub(crate) info: ModelInfo,
    pub(crate) model: Arc<LlamaModel>,
    /// A widened model's decode costs measured here, for the drafting outlook.
    pub(crate) widened_costs: Option<WidenedCosts>,
}

pub(crate) fn engine_thread(
    config: EngineConfig,
    header: model_file::GgufHeader,
    ready: std_mpsc::Sender<Result<Loaded, EngineError>>,
    mut commands: UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) {
    let loaded = backend().and_then(|backend| {
        let model = Arc::new(load_model(backend, &config, &header)?);
        Ok((backend, model))
    });
    let (backend, model) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let draft_llama = match load_draft_model(backend, &config, &model) {
        Ok(draft) => draft,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let on_gpu = ComputeInfo::detect(config.gpu_layers, model.n_layer()).gpu_layers > 0;
    // The batch-invariant kernels are the CPU backend's; a GPU backend picks its own by shape.
    let mut config = config;
    if config.exact && on_gpu {
        tracing::warn!("exact mode needs the model on the CPU; decoding with the GPU's kernels");
        config.exact = false;
    }
    let threads = config.resolved_threads();
    let n_ctx_seq = config
        .ctx_size
        .unwrap_or_else(|| DEFAULT_CTX_SIZE.min(model.n_ctx_train().max(16)));
    let parallel = config.parallel;
    // Sequence ids: one per request, one per request for the prompt cache where they fit, one
    // for retired cells in exact mode, the rest for draft-tree leaves (llama.cpp allows 256).
    let retired = usize::from(config.exact);
    let n_seq_max = (2 * parallel + MAX_DRAFT_TOKENS + retired).min(256);
    let cache_seqs = parallel.min(n_seq_max.saturating_sub(parallel + MAX_DRAFT_TOKENS + retired));
    let n_batch = batch_capacity(config.batch_size, parallel, n_seq_max);
    // Every request gets its own share of one unified KV cache. llama.cpp cuts the batch down
    // to the context (and rounds the context up to 256 cells anyway), so it holds one batch.
    let n_ctx_total = (n_ctx_seq * parallel as u32).max(n_batch);
    let heads = match load_heads(&config, &model, threads) {
        Ok(heads) => heads,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let eagle = match load_eagle(&config, &model, threads) {
        Ok(eagle) => eagle,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    // Medusa heads and the feature drafter read the final hidden states, which llama.cpp
    // returns as embeddings.
    let returns_hidden_states = heads.is_some() || eagle.is_some() || config.hidden_states;
    let params = LlamaContextParams::default()
        .with_embeddings(returns_hidden_states)
        .with_pooling_type(LlamaPoolingType::None)
        .with_n_ctx(NonZeroU32::new(n_ctx_total))
        .with_n_batch(n_batch)
        .with_n_ubatch(n_batch)
        .with_n_seq_max(n_seq_max as u32)
        // Tree nodes share prefix cells across sequences, which needs one unified KV cache.
        .with_kv_unified(true)
        .with_n_threads(threads as i32)
        .with_n_threads_batch(threads as i32);
    // Exact mode's attention walks each query's cells in order only in the flash-attention
    // kernel; the other one sums over cell slots, where a token's place would change its sums.
    let params = if config.exact {
        params.with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED)
    } else {
        params
    };
    // The kernels in effect from here on (stock where this build or CPU has no batched ones).
    config.cpu_kernels = crate::llama::cpu_kernels::select(config.cpu_kernels);
    let created = crate::llama::exact_kernels::creating_context(config.exact, || {
        model.new_context(backend, params)
    });
    let ctx = match created {
        Ok(Ok(ctx)) => ctx,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
        Ok(Err(e)) => {
            let _ = ready.send(Err(EngineError::Context(format!(
                "{e} (context of {n_ctx_seq} tokens for each of {parallel} requests); try a smaller --ctx-size or --parallel"
            ))));
            return;
        }
    };
    // llama.cpp may round the context up; share out what it really holds.
    let n_ctx_seq = ctx.n_ctx() / parallel as u32;
    let cost_cache = config.decode_costs_dir.as_ref().map(|dir| {
        let key = CostKey::new(
            &config.model_path,
            threads,
            config.gpu_layers,
            n_batch,
            n_ctx_total,
            config.exact,
            config.cpu_kernels,
        );
        (CostCache::new(dir), key)
    });
    let widened_costs = cost_cache
        .as_ref()
        .and_then(|(cache, key)| cache.widest_widened(key));
    let mut runtime = LlamaRuntime::new(
        &model,
        ctx,
        RuntimeSettings {
            n_ctx_seq: n_ctx_seq as usize,
            max_seqs_per_token: n_seq_max,
            retired_seq: config.exact.then_some(n_seq_max as i32 - 1),
            returns_hidden_states,
            cost_cache,
            given_costs: config.decode_costs.clone(),
            cpu_threads: (!on_gpu).then_some(threads),
        },
    );
    let draft_model = match &draft_llama {
        None => None,
        Some((draft, _)) => {
            let prepared = draft_context(backend, draft, &config, n_ctx_seq, threads)
                .map(|ctx| DraftModel::new(ctx, parallel, model.n_vocab().max(0) as usize))
                .and_then(|mut draft| {
                    let agreement = draft.measure_agreement(&mut runtime)?;
                    Ok((draft, agreement))
                });
            match prepared {
                Ok(prepared) => Some(prepared),
                Err(err) => {
                    let _ = ready.send(Err(err));
                    return;
                }
            }
        }
    };
    let draft_agreement = draft_model.as_ref().and_then(|(_, agreement)| *agreement);
    runtime.report_calibration_to(config.load_progress.clone());
    let medusa = match heads.map(|heads| plan_medusa(&mut runtime, heads, config.tree.clone())) {
        None => None,
        Some(Ok(setup)) => Some(setup),
        Some(Err(err)) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let mut info = model_info(
        &config,
        &header,
        &model,
        n_ctx_seq,
        n_batch,
        threads,
        runtime.has_chat_template(),
    );
    info.parallel = parallel;
    info.draft_model = draft_llama
        .as_ref()
        .zip(config.draft_model_path.as_ref())
        .map(|((draft, header), path)| draft_model_info(draft, header, path, draft_agreement));
    info.eagle = eagle.as_ref().map(|(_, eagle_info)| eagle_info.clone());
    if let Some(medusa) = &medusa {
        info.heads = Some(medusa.heads.info().clone());
        info.medusa_tree = medusa.plan.tree.clone();
        info.medusa_plan = Some(medusa.plan.clone());
    }
    // Decode costs an earlier load kept are known from the start (the heads' plan may have
    // measured them already). Later measurements happen while serving, not loading.
    runtime.read_cached_costs();
    runtime.report_calibration_to(None);
    tracing::info!(model = %info.name, file_type = %info.file_type, threads, n_ctx_seq, parallel, "model loaded");
    // Made before the engine is ready, so that what it knows (the decode costs) is published by
    // the time the first caller asks.
    let mut drafters = DrafterPool::new(medusa, draft_agreement, config.draft_confidence)
        .with_lookup_memory(config.lookup_memory);
    if let Some((draft, _)) = draft_model {
        drafters =
            drafters.with_step_drafter(Box::new(DraftModelDrafter::new(RefCell::new(draft))));
    }
    if let Some((eagle, eagle_info)) = eagle {
        drafters = drafters
            .with_step_drafter(Box::new(EagleDrafter::new(eagle)))
            .with_prior(
                DrafterKind::Eagle,
                eagle_prior(&eagle_info.heldout_tokens_per_step, eagle_info.draft_ms),
            );
    }
    let batcher = Batcher::new(
        runtime,
        model.as_ref(),
        drafters,
        SequenceIds {
            slots: parallel,
            cache: cache_seqs,
            n_seq_max: n_seq_max - retired,
        },
        shared.clone(),
    );
    let scheduler = Scheduler::new(batcher, shared);
    let loaded = Loaded {
        info,
        model: model.clone(),
        widened_costs,
    };
    if ready.send(Ok(loaded)).is_err() {
        return;
    }
    scheduler.run(&mut commands);
}

/// Settles Medusa mode's tree once the heads are loaded, from the heads' record and this
/// machine's decode costs (measuring them if need be, which clears the KV cache).
fn plan_medusa(
    runtime: &mut LlamaRuntime<'_>,
    heads: Arc<MedusaHeads>,
    given: Option<TreeSpec>,
) -> Result<MedusaSetup, EngineError> {
    let plan = plan_tree(heads.info(), given, || {
        let costs = runtime.ensure_cost_model()?.clone();
        Ok::<_, EngineError>((costs, heads.draft_ms_per_head()))
    })?;
    tracing::info!(decision = %plan.decision, "medusa plan");
    Ok(MedusaSetup::new(heads, plan))
}

/// Loads the configured feature drafter, timing what a tree of 8 costs here.
fn load_eagle(
    config: &EngineConfig,
    model: &LlamaModel,
    threads: usize,
) -> Result<Option<(Arc<FeatureDrafterModel>, EagleInfo)>, EngineError> {
    let Some(path) = &config.feature_drafter_path else {
        return Ok(None);
    };
    let drafter =
        FeatureDrafterModel::load(path, &BaseIdentity::of(model), &config.model_path, threads)?;
    let info = EagleInfo {
        path: path.clone(),
        file_size_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
        window: drafter.shape().window,
        vocab_subset: drafter.vocab_rows(),
        heldout_tokens_per_step: drafter
            .training()
            .map(|t| t.heldout_tokens_per_step.clone())
            .unwrap_or_default(),
        draft_ms: drafter.time_tree(8),
    };
    Ok(Some((Arc::new(drafter), info)))
}

/// Loads the configured heads and checks that a given tree fits them.
fn load_heads(
    config: &EngineConfig,
    model: &LlamaModel,
    threads: usize,
) -> Result<Option<Arc<MedusaHeads>>, EngineError> {
    let Some(path) = &config.heads_path else {
        if config.tree.is_some() {
            return Err(EngineError::InvalidParameter {
                name: "tree",
                message: "a tree needs Medusa heads (--heads PATH)".into(),
            });
        }
        return Ok(None);
    };
    // The heads go where the model's layers went.
    let on_gpu = ComputeInfo::detect(config.gpu_layers, model.n_layer()).gpu_layers > 0;
    let heads = MedusaHeads::load(
        path,
        model,
        &config.model_path,
        threads,
        config.heads_placement,
        on_gpu,
    )?;
    if let Some(tree) = &config.tree {
        tree.check_heads(heads.head_count())
            .map_err(|e| EngineError::InvalidParameter {
                name: "tree",
                message: e.to_string(),
            })?;
    }
    Ok(Some(Arc::new(heads)))
}

/// Loads the configured draft model and checks that its tokens mean what the model's do.
fn load_draft_model(
    backend: &llama_cpp_2::llama_backend::LlamaBackend,
    config: &EngineConfig,
    model: &LlamaModel,
) -> Result<Option<(LlamaModel, model_file::GgufHeader)>, EngineError> {
    let Some(path) = &config.draft_model_path else {
        return Ok(None);
    };
    let header = model_file::inspect(path)?;
    let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
    let draft = load_gguf(backend, path, &header, &params)?;
    if let Some(reason) = VocabSummary::of(model).difference(&VocabSummary::of(&draft)) {
        return Err(EngineError::DraftModelMismatch {
            path: path.clone(),
            reason,
        });
    }
    Ok(Some((draft, header)))
}

/// The draft model's context: a sequence per request, each with the cells a request may use,
/// and a batch that reads a prompt in chunks like the model's.
fn draft_context<'m>(
    backend: &llama_cpp_2::llama_backend::LlamaBackend,
    draft: &'m LlamaModel,
    config: &EngineConfig,
    n_ctx_seq: u32,
    threads: usize,
) -> Result<llama_cpp_2::context::LlamaContext<'m>, EngineError> {
    let parallel = config.parallel as u32;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx_seq * parallel))
        .with_n_batch(config.batch_size)
        .with_n_ubatch(config.batch_size)
        .with_n_seq_max(parallel)
        // Each request's sequence keeps its own share: one long request cannot take another's.
        .with_kv_unified(false)
        .with_n_threads(threads as i32)
        .with_n_threads_batch(threads as i32);
    draft.new_context(backend, params).map_err(|e| {
        EngineError::Context(format!(
            "draft model: {e} (context of {n_ctx_seq} tokens for each of {parallel} requests)"
        ))
    })
}

fn draft_model_info(
    draft: &LlamaModel,
    header: &model_file::GgufHeader,
    path: &std::path::Path,
    agreement: Option<Agreement>,
) -> DraftModelInfo {
    DraftModelInfo {
        path: path.to_path_buf(),
        name: header.display_name(&file_name_of(path)),
        file_type: file_type_of(draft),
        file_size_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
        n_params: draft.n_params(),
        agreement: agreement.map(|a| a.rate),
        ms_per_token: agreement.map(|a| a.ms_per_token),
    }
}

fn file_name_of(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The weight format a model's metadata names, e.g. "Q4_1".
fn file_type_of(model: &LlamaModel) -> String {
    model
        .meta_val_str("general.file_type")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or_else(|| "unknown".to_owned(), file_type_name)
}

fn load_model(
    backend: &llama_cpp_2::llama_backend::LlamaBackend,
    config: &EngineConfig,
    header: &model_file::GgufHeader,
) -> Result<LlamaModel, EngineError> {
    let mut params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
    if let Some(progress) = config.load_progress.clone() {
        params = params.with_progress_callback(move |share| {
            progress.report(LoadStage::Weights, share);
            true
        });
    }
    load_gguf(backend, &config.model_path, header, &params)
}

/// Loads a model file, with what llama.cpp logged as the reason when it cannot.
fn load_gguf(
    backend: &llama_cpp_2::llama_backend::LlamaBackend,
    path: &std::path::Path,
    header: &model_file::GgufHeader,
    params: &LlamaModelParams,
) -> Result<LlamaModel, EngineError> {
    clear_recent_errors();
    LlamaModel::load_from_file(backend, path, params).map_err(|e| {
        let errors = take_recent_errors();
        let reason = if errors.is_empty() {
            e.to_string()
        } else {
            errors.join("; ")
        };
        EngineError::LoadFailed {
            path: path.to_path_buf(),
            architecture: header.architecture.clone(),
            reason,
        }
    })
}

fn model_info(
    config: &EngineConfig,
    header: &model_file::GgufHeader,
    model: &LlamaModel,
    n_ctx: u32,
    n_batch: u32,
    threads: usize,
    has_chat_template: bool,
) -> ModelInfo {
    let path = config.model_path.clone();
    ModelInfo {
        name: header.display_name(&file_name_of(&path)),
        metadata_name: header.name.clone(),
        architecture: header.architecture.clone(),
        file_type: file_type_of(model),
        file_size_bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
        path,
        n_params: model.n_params(),
        n_layer: model.n_layer(),
        n_embd: model.n_embd().max(0) as u32,
        n_vocab: model.n_vocab().max(0) as u32,
        n_ctx_train: model.n_ctx_train(),
        n_ctx,
        n_batch,
        threads,
        compute: ComputeInfo::detect(config.gpu_layers, model.n_layer()),
        has_chat_template,
        sampling_defaults: SamplingDefaults::from_metadata(|key| model.meta_val_str(key).ok()),
        heads: None,
        medusa_tree: None,
        medusa_plan: None,
        drafting_outlook: None,
        draft_model: None,
        eagle: None,
        parallel: 1,
        exact: config.exact,
        cpu_kernels: config.cpu_kernels,
        cpu_instruction_set: crate::llama::cpu_kernels::instruction_set(config.cpu_kernels),
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn the_batch_holds_an_output_for_every_sequence_and_a_whole_tree() {
        for parallel in [1, 4, 64] {
            let n_seq_max = (2 * parallel + MAX_DRAFT_TOKENS).min(256);
            for batch_size in [1, 32, 64, 128] {
                let n_batch = batch_capacity(batch_size, parallel, n_seq_max) as usize;
                assert!(n_batch >= n_seq_max, "{batch_size} for {parallel}");
                assert!(n_batch >= MAX_DRAFT_TOKENS + parallel);
            }
        }
        // A larger chunk of prompt is kept as asked.
        assert_eq!(batch_capacity(1024, 4, 136), 1024);
    }
}
