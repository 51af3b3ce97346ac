// The backend's wire contract, generated from its Rust types (crates/playground/src/contract.rs).
// Do not edit: `UPDATE_CONTRACT=1 cargo test -p playground --test contract` rewrites it.

/**
 * How tokens are produced.
 */
export type Mode = "normal" | "medusa" | "lookup" | "auto" | "draft" | "eagle";

/**
 * What lookup does with its memory of earlier requests' text for one request.
 */
export type LookupMemoryUse = "read_write" | "read_only" | "off";

export type ChatMessage = { role: 'system' | 'user' | 'assistant', content: string, };

/**
 * Sampling settings. Defaults are llama.cpp's.
 */
export type SamplingParams = { 
/**
 * 0 means greedy.
 */
temperature: number, 
/**
 * 0 disables top-k.
 */
top_k: number, 
/**
 * 1 disables top-p.
 */
top_p: number, 
/**
 * 0 disables min-p.
 */
min_p: number, 
/**
 * 1 disables the repetition penalty.
 */
repeat_penalty: number, 
/**
 * How many recent tokens the penalties look at.
 */
repeat_last_n: number, 
/**
 * Subtracted once from the logit of every token in the penalty window (OpenAI's
 * `presence_penalty`); 0 disables it.
 */
presence_penalty: number, 
/**
 * Subtracted from a token's logit once per time it occurs in the window (OpenAI's
 * `frequency_penalty`); 0 disables it.
 */
frequency_penalty: number, 
/**
 * Added to these tokens' logits before anything else (OpenAI's `logit_bias`); -100 bans
 * a token.
 */
logit_bias?: Array<LogitBias>, 
/**
 * Fixes the random draws; without it a seed is picked and reported with the run.
 */
seed: number | null, };

/**
 * One entry of [`SamplingParams::logit_bias`].
 */
export type LogitBias = { token: number, bias: number, };

/**
 * Body of a generation from the UI (`/api/generate`, the desktop app's `generate`): a raw
 * `prompt` to continue or chat `messages` for the model's template, not both. Defaults: 256
 * tokens, normal mode, the engine's sampling defaults (llama.cpp's), no stop strings.
 */
export type PlaygroundRequest = { prompt?: string, messages?: Array<ChatMessage>, 
/**
 * `normal`, `medusa` or `lookup` (any case).
 */
mode?: Mode, max_tokens?: number, stop?: Array<string>, 
/**
 * Any subset of the sampling settings; the rest take their defaults.
 */
sampling?: Partial<SamplingParams>, 
/**
 * Cap on drafted tokens per step (speculative modes, `auto` drafting).
 */
max_draft_tokens?: number, 
/**
 * `false` reads the whole prompt: no cells reused from earlier requests, none kept.
 */
cache_prompt?: boolean, 
/**
 * Whether lookup drafts from its memory of earlier requests' text and adds this one's
 * (`read_write`, the default), only drafts from it (`read_only`: one prompt measured in
 * several modes), or neither (`off`).
 */
lookup_memory?: LookupMemoryUse, 
/**
 * The conversation this chat belongs to: it takes the request's messages and the answer.
 */
conversation_id?: number, 
/**
 * Write on from the last (assistant) message instead of answering it.
 */
continue_final_message?: boolean, 
/**
 * Run on this remote engine (by name) instead of the model served here.
 */
engine?: string, 
/**
 * The remote engine's model; default: the first it lists.
 */
model?: string, 
/**
 * The answer must be JSON: `true` for any JSON object, or a JSON schema it must follow.
 */
json?: boolean | Record<string, unknown>, 
/**
 * GBNF text the answer must follow (llama.cpp's grammar format); not with `json`.
 */
grammar?: string, 
/**
 * Report each generated token's log-probability and this many likeliest alternatives
 * (0 to 20), with the `text` events and the run's summary.
 */
logprobs?: number, 
/**
 * Medusa mode: `"auto"` (the default: as much of the tree sized for this machine as pays,
 * or the model's default tree set in Settings), or a tree drafted in full at every step
 * whatever it costs: `"tuned"` (the fastest tree the tuner found here), `"mc_sim_7b_63"`,
 * `"chain-N"`, or its rank paths such as `[[0], [0, 0], [1]]`. Auto mode: a named tree is
 * drafted in full beside lookup's whole continuation at every step.
 */
tree?: TreeChoice, 
/**
 * Lookup, draft and eagle modes: draft this many tokens at every step that has a guess
 * (default: as many as pay).
 */
draft_length?: number, };

/**
 * A tree by name or by its paths. Files are not read here: a path is somebody else's input.
 */
export type TreeChoice = string | Array<Array<number>>;

/**
 * Who proposed a token. On the wire (events, the run history) it is one name: `model`,
 * `medusa_head_K`, `lookup`, `draft_model` or `eagle`.
 */
export type TokenSource = 'model' | 'lookup' | 'draft_model' | 'eagle' | `medusa_head_${number}`;

/**
 * One event of a run, `{"type": ..., ...}`. A run sends `started`, then `text` and (in the
 * speculative modes) `step` events, and ends with `finished` or `failed`.
 */
export type RunEvent = { "type": "started", run_id: number, prompt_tokens: number, } | { "type": "text", text: string, token_ids: Array<number>, sources: Array<TokenSource>, 
/**
 * Per token, when the run asked for log-probabilities.
 */
logprobs?: Array<TokenLogprobs>, } | { "type": "step" } & StepEvent | { "type": "finished" } & FinishedEvent | { "type": "failed", run_id: number, code: string, message: string, };

/**
 * One speculative step: what was drafted and what the base model kept.
 */
export type StepEvent = { 
/**
 * 1-based: the first step after the prompt is step 1, as the summary's `steps` counts.
 */
index: number, 
/**
 * Drafted nodes (the root not counted).
 */
tree_size: number, tree_depth: number, 
/**
 * Tokens this step emits, the base model's own included.
 */
accepted_len: number, tokens: Array<number>, sources: Array<TokenSource>, 
/**
 * Per depth of the drafted tree: whether its token was accepted.
 */
depth_hits: Array<boolean>, draft_ms: number, verify_ms: number, 
/**
 * What was drafted, node by node, and what the model made of it.
 */
tree: StepTree, 
/**
 * Why nothing was drafted; `None` when something was.
 */
skip: DraftSkip | null, 
/**
 * What the draft budget weighed for this step, where it decided (auto drafting). Boxed:
 * most events carry none, and every event would otherwise be as large.
 */
decision?: DraftDecision, };

/**
 * A step's drafted tree as the model judged it.
 */
export type StepTree = { 
/**
 * The token the tree hangs from (the last one emitted before the step).
 */
root: StepToken, 
/**
 * Parents come before their children.
 */
nodes: Array<DraftNode>, 
/**
 * The model's own token after the accepted path: at the first rejection, the token it chose
 * instead of the drafted ones.
 */
model_token: StepToken, };

/**
 * A token and its text.
 */
export type StepToken = { token: number, text: string, };

/**
 * One drafted token.
 */
export type DraftNode = { token: number, text: string, 
/**
 * Index of its parent in the step's `nodes`; `None` hangs from the root.
 */
parent: number | null, source: TokenSource, 
/**
 * Rank among its proposer's guesses: 0 is a head's top-1; for lookup, which earlier match.
 */
rank: number, 
/**
 * A second drafter that guessed the same token here (auto mode merges their trees).
 */
also_proposed_by?: TokenSource, accepted: boolean, };

/**
 * Why a speculative step drafted nothing.
 */
export type DraftSkip = { reason: DraftSkipReason, 
/**
 * The reason in words, with the budget's figures where it weighed costs.
 */
message: string, };

export type DraftSkipReason = "not_worth_it" | "costs_unknown" | "no_candidates" | "no_room";

/**
 * Why a step drafted what it did: the figures the draft budget weighed.
 */
export type DraftDecision = { 
/**
 * Tokens the step was expected to yield with what was drafted (1 when nothing was), at
 * the cautious acceptance rates below.
 */
expected_tokens: number, 
/**
 * The step's expected time with that draft (drafting included, the decode at the top of
 * its measured band), and a plain step's time.
 */
step_ms: number, plain_ms: number, 
/**
 * Each drafter's evidence.
 */
evidence: Array<DrafterEvidence>, };

/**
 * What a drafter's acceptance rate in a step rested on.
 */
export type DrafterEvidence = { drafter: string, 
/**
 * The evidence class of its proposal (lookup: by the length of its match).
 */
class: number, 
/**
 * Drafted tokens judged in that class so far, and how many were accepted.
 */
accepted: number, tried: number, 
/**
 * The lower confidence bound of the acceptance rate the budget planned with.
 */
cautious_rate: number, 
/**
 * Tokens it could propose, and how many the budget drafted.
 */
proposed: number, drafted: number, };

/**
 * The run's summary, with its id.
 */
export type FinishedEvent = { run_id: number, text: string, prompt_tokens: number, 
/**
 * Leading prompt tokens whose KV cells came from an earlier request (the prompt cache):
 * not decoded again.
 */
cached_prompt_tokens: number, tokens_generated: number, 
/**
 * Waiting for a free slot.
 */
queue_ms: number, 
/**
 * From its turn (a free slot) to the first generated token: reading the prompt. The wait
 * before it is `queue_ms`.
 */
ttft_ms: number, 
/**
 * From submission to the end (`queue_ms` included).
 */
total_ms: number, 
/**
 * Generated tokens over the time the run held a slot.
 */
tokens_per_second: number, 
/**
 * Tokens after the first over the time after the first: the decode speed alone.
 */
decode_tokens_per_second: number, stop_reason: StopReason, 
/**
 * The seed the sampler used, so a sampled run can be repeated.
 */
seed: number, 
/**
 * The generated token ids, in order.
 */
token_ids: Array<number>, mode: Mode, 
/**
 * Decode steps after the prompt (each yields at least the base model's own token): the
 * number of step events a speculative run sends. The first token, read with the prompt,
 * is not one.
 */
steps: number, 
/**
 * Tokens the steps yielded per step, the base model's own token included: plain decoding
 * is 1.0 (also when no step ran).
 */
mean_accepted: number, 
/**
 * For each tree depth d (1-based, index d-1), the share of steps whose tree reached depth d
 * in which the drafted token at that depth was accepted. Empty in normal mode.
 */
acceptance_by_depth: Array<number>, 
/**
 * Drafted tokens on the verified paths (each step's tree depth), and how many of them were
 * accepted: llama-server's `draft_n` and `draft_n_accepted`. `None` from a remote engine
 * that does not report them.
 */
draft_tokens: number | null, accepted_draft_tokens: number | null, 
/**
 * Time spent drafting and verifying (speculative modes).
 */
draft_ms: number, verify_ms: number, 
/**
 * When asked for: per generated token, its log-probability and the most likely tokens at
 * its place.
 */
logprobs?: Array<TokenLogprobs>, };

/**
 * Statistics of one finished run.
 */
export type RunSummary = { text: string, prompt_tokens: number, 
/**
 * Leading prompt tokens whose KV cells came from an earlier request (the prompt cache):
 * not decoded again.
 */
cached_prompt_tokens: number, tokens_generated: number, 
/**
 * Waiting for a free slot.
 */
queue_ms: number, 
/**
 * From its turn (a free slot) to the first generated token: reading the prompt. The wait
 * before it is `queue_ms`.
 */
ttft_ms: number, 
/**
 * From submission to the end (`queue_ms` included).
 */
total_ms: number, 
/**
 * Generated tokens over the time the run held a slot.
 */
tokens_per_second: number, 
/**
 * Tokens after the first over the time after the first: the decode speed alone.
 */
decode_tokens_per_second: number, stop_reason: StopReason, 
/**
 * The seed the sampler used, so a sampled run can be repeated.
 */
seed: number, 
/**
 * The generated token ids, in order.
 */
token_ids: Array<number>, mode: Mode, 
/**
 * Decode steps after the prompt (each yields at least the base model's own token): the
 * number of step events a speculative run sends. The first token, read with the prompt,
 * is not one.
 */
steps: number, 
/**
 * Tokens the steps yielded per step, the base model's own token included: plain decoding
 * is 1.0 (also when no step ran).
 */
mean_accepted: number, 
/**
 * For each tree depth d (1-based, index d-1), the share of steps whose tree reached depth d
 * in which the drafted token at that depth was accepted. Empty in normal mode.
 */
acceptance_by_depth: Array<number>, 
/**
 * Drafted tokens on the verified paths (each step's tree depth), and how many of them were
 * accepted: llama-server's `draft_n` and `draft_n_accepted`. `None` from a remote engine
 * that does not report them.
 */
draft_tokens: number | null, accepted_draft_tokens: number | null, 
/**
 * Time spent drafting and verifying (speculative modes).
 */
draft_ms: number, verify_ms: number, 
/**
 * When asked for: per generated token, its log-probability and the most likely tokens at
 * its place.
 */
logprobs?: Array<TokenLogprobs>, };

export type StopReason = "end_of_generation" | "max_tokens" | "stop_string" | "context_full" | "cancelled";

/**
 * How every error reaches the UI: the body of HTTP errors (`{"error": ...}`) and of rejected
 * desktop commands.
 */
export type ApiErrorBody = { code: string, message: string, 
/**
 * The error's class in OpenAI's terms (`invalid_request_error`, `authentication_error`,
 * `permission_error`, `server_error`), which OpenAI clients read.
 */
type?: string, 
/**
 * The request field at fault; null where none is (always sent, as OpenAI clients read it).
 */
param?: string | null, 
/**
 * What lies under the message in its own words (a network error's text), where known.
 */
detail?: string, };

/**
 * What the page sends.
 */
export type StreamRequest = { "type": "generate", id: number, request: PlaygroundRequest, } | { "type": "cancel", id: number, } | { "type": "status", every_ms: number, };

/**
 * What the backend sends.
 */
export type StreamMessage = { "type": "run", id: number, event: RunEvent, } | { "type": "refused", id: number, error: ApiErrorBody, } | { "type": "status", info: Info, } | { "type": "error", error: ApiErrorBody, };

/**
 * Two outputs of one prompt: `expected` (normal decoding's) and `got` (another mode's, or a
 * remote engine's), as token ids.
 */
export type DivergenceRequest = { 
/**
 * The raw prompt both continued, or the chat `messages` both answered (not both).
 */
prompt?: string, messages?: Array<ChatMessage>, expected: Array<number>, got: Array<number>, };

/**
 * The first token where the outputs part, with the model's view of both tokens there.
 */
export type Divergence = { 
/**
 * Index of the first differing token (0-based, among the generated tokens).
 */
at: number, expected: TokenChoice, got: TokenChoice, 
/**
 * Whether the two tokens were nearly equally likely (log-probabilities less than
 * [`NEAR_TIE_LOGPROB_GAP`] apart).
 */
near_tie: boolean, };

/**
 * One candidate for the next token.
 */
export type TokenChoice = { token_id: number, 
/**
 * The token's own text.
 */
text: string, 
/**
 * The token's bytes: a piece of a character spanning several tokens is not text alone.
 */
bytes: Array<number>, 
/**
 * Natural log of the model's probability for it (temperature 1, nothing filtered).
 */
logprob: number, 
/**
 * 1 for the model's most likely token, 2 for the next, and so on.
 */
rank: number, };

/**
 * A generated token's log-probability and the most likely tokens at its place.
 */
export type TokenLogprobs = { chosen: TokenChoice, 
/**
 * Most likely first; as many as the request asked for.
 */
top: Array<TokenChoice>, };

/**
 * The model (or the load in progress), heads, tree, modes, engine metrics and the database.
 * `model` is null until a first model has loaded; while another loads, the current one keeps
 * serving and `loading` says what is coming. `error` is the last load failure (the previous
 * model, if any, stays in use).
 */
export type Info = { model: ModelInfo | null, heads: HeadsInfo | null, heads_path: string | null, 
/**
 * The Medusa tree in use (paths of ranks), null without heads.
 */
tree: TreeSpec | null, 
/**
 * The tree Medusa requests drafting `auto` draft in full instead, as set in Settings; null
 * keeps `auto`.
 */
default_tree: TreeChoice | null, 
/**
 * The trees a request may name for the model served now (its tree picker's choices).
 */
tree_names: Array<string>, modes: Array<Mode>, metrics: EngineMetrics | null, database: string, loading: LoadingStatus | null, error: ApiErrorBody | null, 
/**
 * The remote engines runs may name (`engine`), as last seen.
 */
remotes: Array<RemoteEngineInfo>, };

/**
 * What a loaded model is, for display and for recording next to every run.
 */
export type ModelInfo = { path: string, 
/**
 * The name people know the model by (see `GgufHeader::display_name`).
 */
name: string, 
/**
 * The file's own `general.name`, when it has one.
 */
metadata_name: string | null, architecture: string, 
/**
 * Weight format, e.g. "Q4_1".
 */
file_type: string, file_size_bytes: number, n_params: number, n_layer: number, n_embd: number, n_vocab: number, n_ctx_train: number, 
/**
 * Context cells each request may use (prompt, output and draft tree).
 */
n_ctx: number, 
/**
 * Requests decoded together.
 */
parallel: number, n_batch: number, threads: number, 
/**
 * The backend, the devices and the layers on a GPU.
 */
compute: ComputeInfo, has_chat_template: boolean, 
/**
 * Sampling for chats: the model's recommendations, else the playground's chat default.
 */
sampling_defaults: SamplingDefaults, 
/**
 * The Medusa heads loaded with the model, if any.
 */
heads: HeadsInfo | null, 
/**
 * The token tree Medusa mode uses; `None` with heads when it decodes plainly.
 */
medusa_tree: TreeSpec | null, 
/**
 * How Medusa mode's tree was settled on this machine, and the decision in words.
 */
medusa_plan: MedusaPlan | null, 
/**
 * Whether drafting can pay for this model here, and why, from the decode costs measured
 * here. It changes as they are learnt, so the engine leaves it `None` in what the model was
 * loaded with; whoever reports the model fills it from
 * [`Engine::known_drafting_outlook`](crate::Engine::known_drafting_outlook) (`None` until
 * the costs are known) or [`Engine::drafting_outlook`](crate::Engine::drafting_outlook).
 */
drafting_outlook: DraftingOutlook | null, 
/**
 * The draft model loaded beside the model, if any.
 */
draft_model: DraftModelInfo | null, 
/**
 * The feature drafter loaded beside the model, if any.
 */
eagle: EagleInfo | null, 
/**
 * Exact mode: batch-invariant kernels and cells in position order, so that greedy
 * speculative and batched output is plain decoding's, bit for bit.
 */
exact: boolean, 
/**
 * The CPU kernels decodes of several tokens ran with when the model loaded.
 */
cpu_kernels: CpuKernels, 
/**
 * The instruction set Q4_1 and Q8_0 products ran with when the model loaded, in words
 * ("AVX-512 VNNI", "AVX2").
 */
cpu_instruction_set: string, };

/**
 * A draft model: a smaller model with the same vocabulary that drafts for the served one.
 */
export type DraftModelInfo = { path: string, name: string, 
/**
 * Weight format, e.g. "Q4_0".
 */
file_type: string, file_size_bytes: number, n_params: number, 
/**
 * Of its confident guesses along the model's own answer to a question asked at load, the
 * share the model agreed with: where its acceptance starts.
 */
agreement: number | null, 
/**
 * One draft decode of a single token, measured at load.
 */
ms_per_token: number | null, };

/**
 * A feature drafter: one decoder layer on the model's hidden states that drafts a tree.
 */
export type EagleInfo = { path: string, file_size_bytes: number, 
/**
 * Recent positions its attention reads besides the drafted path.
 */
window: number, 
/**
 * Tokens it can propose (the most frequent of its training answers), when restricted.
 */
vocab_subset: number | null, 
/**
 * Tokens per step of its trees along held-out answers when it was trained:
 * `(max_nodes, tokens per step)`.
 */
heldout_tokens_per_step: Array<[number, number]>, 
/**
 * Growing an 8-node tree for one request, measured at load.
 */
draft_ms: number, };

/**
 * Sampling for chats on this model, and where each value came from.
 */
export type SamplingDefaults = { params: SamplingParams, 
/**
 * The GGUF keys the values came from; empty when the model recommends nothing.
 */
from_model: Array<string>, };

/**
 * The compute behind a loaded model.
 */
export type ComputeInfo = { 
/**
 * "CPU", or the backend the offloaded layers went to ("CUDA", "Vulkan", "Metal").
 */
backend: string, 
/**
 * Every device this build of llama.cpp found, the CPU included.
 */
devices: Array<ComputeDevice>, 
/**
 * Layers on a GPU, of `total_layers` (the repeating layers and the output layer).
 */
gpu_layers: number, total_layers: number, 
/**
 * In words: "CUDA, 31 of 31 layers on NVIDIA H100" or "CPU (no GPU found)".
 */
summary: string, };

export type ComputeDevice = { 
/**
 * e.g. "CUDA0".
 */
name: string, 
/**
 * e.g. "NVIDIA H100 80GB HBM3".
 */
description: string, backend: string, 
/**
 * `cpu`, `gpu`, `igpu` (integrated), `accelerator` or `unknown`.
 */
kind: string, memory_total_bytes: number, memory_free_bytes: number, };

/**
 * The CPU kernels for decodes of several tokens.
 */
export type CpuKernels = "batched" | "batched_avx2" | "stock";

/**
 * What a heads file says about itself.
 */
export type HeadsInfo = { head_count: number, layers_per_head: number, 
/**
 * True when the heads reuse the base model's output projection.
 */
shared_projection: boolean, 
/**
 * True when the heads also read the root token's embedding.
 */
root_token_input: boolean, 
/**
 * True when each head also reads the tokens drafted between the root and its guess.
 */
path_input: boolean, default_tree: TreeSpec, base: BaseIdentity, projection_type: string, 
/**
 * Tokens the heads can propose when their vocabulary is restricted to the most frequent
 * ones (FR-Spec); `None` for the whole vocabulary.
 */
vocab_subset: number | null, 
/**
 * How the heads were trained and how well they did on held-out text, when trained here.
 */
training: TrainingRecord | null, 
/**
 * Where they run.
 */
compute: HeadsCompute, };

/**
 * Who the heads were made for: enough to refuse heads of another model.
 */
export type BaseIdentity = { n_embd: number, n_vocab: number, 
/**
 * SHA-256 over every token's text, in id order.
 */
tokenizer_sha256: string, };

/**
 * What `medusa train-heads` stores with the heads it writes.
 */
export type TrainingRecord = { prompts: number, train_positions: number, heldout_positions: number, epochs: number, 
/**
 * Per head, the share of held-out positions where its best guess was right.
 */
heldout_top1: Array<number>, 
/**
 * Per head, the share where the right token was among its five best guesses.
 */
heldout_top5: Array<number>, 
/**
 * Per head, the share of held-out positions where its rank-r guess was right (r = 0..10):
 * what Medusa mode sizes its tree from. Empty in files written before it was recorded.
 */
heldout_by_rank?: Array<Array<number>>, heldout_loss: number, 
/**
 * The command line that trained them, to reproduce them.
 */
command: string, };

/**
 * Where the heads run, and what each place cost when they loaded.
 */
export type HeadsCompute = { 
/**
 * "thread pool", or the ggml backend's device ("CPU", "CUDA0").
 */
runs_on: string, 
/**
 * Milliseconds one head takes to propose its ten best tokens on the thread pool, the
 * fastest of a few runs (`None` when it was not timed).
 */
thread_pool_ms: number | null, 
/**
 * The same on the ggml backend, when it could run them.
 */
ggml_ms: number | null, 
/**
 * The ggml backend's device, when one started.
 */
ggml_device: string | null, 
/**
 * Why the heads do not run on the ggml backend, when they could not.
 */
ggml_error: string | null, 
/**
 * For heads that read the drafted path: what each further node adds to an evaluation of
 * the nodes of one depth together, where the heads run (measured with eight at once).
 */
extra_node_ms: number | null, 
/**
 * In words: where the heads run and what each place cost, e.g. "CPU (ggml backend),
 * 0.150 ms per head; thread pool 0.180 ms".
 */
summary: string, };

/**
 * A tree shape as Medusa "choices": each path lists, per depth, the rank in that head's top-k.
 */
export type TreeSpec = number[][];

/**
 * Medusa mode's tree and the reason for it.
 */
export type MedusaPlan = { origin: TreeOrigin, 
/**
 * The tree Medusa mode drafts with; `None` when it decodes plainly because no tree pays.
 */
tree: TreeSpec | null, 
/**
 * For a tuned plan: expected tokens per step with its tree (1 when plain).
 */
expected_tokens_per_step: number | null, 
/**
 * For a tuned plan: predicted speed-up over plain decoding (1 when plain).
 */
predicted_speedup: number | null, 
/**
 * The decision in words.
 */
decision: string, 
/**
 * For a tuned plan: what each named tree would do here drafted in full at every step.
 */
forecasts: Array<TreeForecast>, 
/**
 * For a tuned plan: the fastest tree predicted here, even when plain decoding is faster
 * still. Requests name it `tuned` to see it drafted in full.
 */
tuned_tree: TreeSpec | null, 
/**
 * For a tuned plan: the decode costs it was sized from, with their bands.
 */
decode_costs: DecodeCosts | null, };

/**
 * Where Medusa mode's tree came from.
 */
export type TreeOrigin = "given" | "stored" | "tuned";

/**
 * What a given tree is predicted to do on this machine when drafted in full at every step.
 */
export type TreeForecast = { 
/**
 * The tree's name (`mc_sim_7b_63`, `chain-N`).
 */
name: string, nodes: number, 
/**
 * Tokens per step, the model's own included, from the heads' held-out accuracy.
 */
expected_tokens: number, 
/**
 * Drafting plus one decode of the root and the tree.
 */
step_ms: number, 
/**
 * Over plain decoding.
 */
predicted_speedup: number, 
/**
 * What each drafted token adds to a decode here.
 */
extra_token_ms: number, 
/**
 * The speed-up at the top and the bottom of the decode costs' measured band.
 */
speedup_low: number, speedup_high: number, 
/**
 * Faster or slower than plain decoding, or uncertain where the band allows both.
 */
verdict: Verdict, };

/**
 * Whether a tree is faster than plain decoding, across the decode costs' measured band.
 */
export type Verdict = "faster" | "slower" | "uncertain";

/**
 * The decode costs as reported: the figures with their bands, where they came from, and
 * whether the machine was too busy for them to be kept.
 */
export type DecodeCosts = { points: Array<CostPoint>, source: CostSource, 
/**
 * Why the calibration was not kept in the cache (the machine was busy), if it was not.
 */
busy: string | null, 
/**
 * Batch sizes whose figures now come from real steps of this engine.
 */
updated_by_steps: Array<number>, };

/**
 * One batch size's decode time.
 */
export type CostPoint = { 
/**
 * Tokens in the batch.
 */
tokens: number, 
/**
 * The central figure, in milliseconds.
 */
ms: number, 
/**
 * The band it was seen in (equal to `ms` for a figure given without one).
 */
low_ms: number, high_ms: number, };

/**
 * Where the figures came from, as `medusa info` and Settings say it.
 */
export type CostSource = "given" | "measured" | "cached";

/**
 * Why drafting does or does not pay for the loaded model here.
 */
export type DraftingOutlook = { 
/**
 * Decode time of 2 tokens in one batch, in decodes of one token.
 */
two_tokens: number, 
/**
 * The same for 4 tokens.
 */
four_tokens: number, regime: CostRegime, 
/**
 * How often a single drafted token must be accepted to pay for itself (0..1).
 */
break_even_acceptance: number, 
/**
 * The physics here, in plain words.
 */
explanation: string, 
/**
 * What a bigger model would change, from the widened default model's costs where they
 * were measured here.
 */
model_size: string, 
/**
 * A weight format whose CPU kernels batch where the loaded one's do not, to convert to
 * (`medusa quantize --type`, or Settings).
 */
better_format: string | null, 
/**
 * Why that format, in plain words.
 */
format_note: string | null, };

/**
 * How an extra token in a decode is priced here.
 */
export type CostRegime = "compute_bound" | "between" | "memory_bound";

/**
 * Engine-wide counters, for the UI and the server's metrics.
 */
export type EngineMetrics = { 
/**
 * Most requests decoding at once.
 */
slots: number, 
/**
 * Requests decoding now.
 */
active: number, 
/**
 * Requests and embedding calls waiting for the engine (a request with a grammar while
 * its grammar is compiled, too).
 */
queued: number, steps: number, 
/**
 * Tokens in all decodes so far (prompt chunks, roots and draft trees).
 */
batch_tokens: number, 
/**
 * Tokens emitted to requests so far.
 */
tokens_emitted: number, 
/**
 * Tokens in the last decode.
 */
last_batch_tokens: number, 
/**
 * Requests in the last decode over the slots.
 */
last_occupancy: number, requests_finished: number, requests_failed: number, 
/**
 * Sequences holding KV cells, counted when the engine last went idle (0 when nothing leaked);
 * the prompt cache's are not counted.
 */
idle_sequences_in_kv: number, 
/**
 * Finished requests whose cells the prompt cache keeps.
 */
cached_sequences: number, 
/**
 * KV cells held by requests and the prompt cache, after the last step.
 */
kv_cells_used: number, 
/**
 * KV cells in all (every slot's share).
 */
kv_cells: number, 
/**
 * Decodes of the draft model, and the tokens in them: it reads and guesses for every
 * drafting request in the same decodes, so tokens per decode grow with the requests.
 */
draft_model_decodes: number, draft_model_tokens: number, 
/**
 * Evaluations of a Medusa head while drafting, and the questions in them: each step asks a
 * head once per depth for every request drafting with the heads, so questions per
 * evaluation grow with the requests.
 */
heads_evaluations: number, heads_queries: number, 
/**
 * Evaluations of the feature drafter's layer while drafting (one per depth for every
 * request growing a tree), and the tree nodes in them.
 */
eagle_evaluations: number, eagle_queries: number, 
/**
 * Embedding calls the engine holds, waiting or being read (those waiting also count in
 * `queued`).
 */
embedding_calls: number, 
/**
 * Tokens read for embedding calls so far.
 */
embedding_tokens: number, };

/**
 * A model being loaded (in the background) to replace the current one, if any.
 */
export type LoadingStatus = { model: string, heads: string | null, 
/**
 * e.g. "fetching model", "loading model", "measuring decode costs (first load only)".
 */
stage: string, 
/**
 * Share of the current stage done (0..1), when known.
 */
progress: number | null, elapsed_ms: number, };

/**
 * Another model (and heads, tree) to load.
 */
export type LoadModelRequest = { 
/**
 * A GGUF path on the machine running the backend.
 */
model: string, 
/**
 * A `*.medusa.gguf` heads file; null for none.
 */
heads?: string | null, 
/**
 * A smaller GGUF with the model's vocabulary that drafts for it (draft mode, and part of
 * auto); null for none.
 */
draft_model?: string | null, 
/**
 * A feature drafter for the model (`medusa train-drafter`; eagle mode, and part of auto);
 * null for none.
 */
drafter?: string | null, 
/**
 * Tree name (`mc_sim_7b_63`, `chain-N`) or a JSON file; null for the heads' default.
 */
tree?: string | null, 
/**
 * Context cells each request may use (prompt, answer and draft tree); null keeps the
 * size the backend was started with.
 */
ctx_size?: number | null, 
/**
 * Exact mode (batch-invariant sums: greedy speculative output is normal decoding's, bit for
 * bit; prompts read slower); null keeps the backend's setting.
 */
exact?: boolean | null, 
/**
 * Load the model converted to this weight format (`q4_0`, ...): written beside it with
 * llama.cpp's quantizer on first use, and kept; the original file stays. Null loads the
 * model as it is.
 */
convert_to?: string | null, };

/**
 * A remote engine as the UI sees it (never its key).
 */
export type RemoteEngineInfo = { name: string, url: string, 
/**
 * Whether requests carry an API key.
 */
has_key: boolean, 
/**
 * Kept in the saved list (added in Settings); otherwise given on the command line for this
 * process only.
 */
saved: boolean, 
/**
 * The models it listed when last asked; the first is the default.
 */
models: Array<string>, 
/**
 * What its model list told it is; null until it answered once.
 */
kind: RemoteEngineKind | null, 
/**
 * The modes a run on it may ask for: those another `medusa serve` lists; normal alone on
 * any other engine, and until it answered.
 */
modes: Array<Mode>, 
/**
 * Why it could not be asked last time; null when it answered.
 */
error: ApiErrorBody | null, };

/**
 * What kind of engine a remote is, as its model list tells (see [`RemoteKind`]).
 */
export type RemoteEngineKind = "medusa_serve" | "extended" | "openai";

/**
 * Body of adding a remote engine (Settings, `POST /api/remotes`).
 */
export type AddRemoteRequest = { name: string, 
/**
 * Its base address, such as `http://gpu-box:8000`.
 */
url: string, api_key?: string, };

/**
 * Settings' tree: what Medusa requests drafting `auto` draft in full, changed without reloading
 * the model. `"auto"` undoes it.
 */
export type SetTreeRequest = { tree: TreeChoice, };

/**
 * How long an answer each tuning prompt gets and the largest tree considered; the engine's
 * tuning defaults for what is left out.
 */
export type TuneRequest = { max_tokens?: number, max_nodes?: number, confirm?: boolean, };

/**
 * Train Medusa heads for a model on its own answers.
 */
export type TrainingRequest = { 
/**
 * The GGUF model (a path the playground may load).
 */
model: string, 
/**
 * A prompt file, one prompt per line; the project's prompt set when absent.
 */
prompts?: string, 
/**
 * Answer only the first N prompts.
 */
samples?: number, 
/**
 * Tokens the model writes per answer.
 */
max_tokens?: number, epochs?: number, heads?: number, 
/**
 * Let the heads propose only the N most frequent answer tokens.
 */
vocab_subset?: number, 
/**
 * Heads that also read the drafted path (the shipped heads' kind; default true).
 */
path_input?: boolean, 
/**
 * Prompts the tune after training answers to measure the heads.
 */
tune_prompts?: number, tune_max_tokens?: number, };

/**
 * What a job runs with: the request with every default filled in. Stored with the job, so that
 * a resume does exactly what the start did.
 */
export type TrainingSettings = { 
/**
 * The prompt file; `null` for the project's prompt set.
 */
prompts_file: string | null, 
/**
 * Prompts answered.
 */
samples: number, max_tokens: number, epochs: number, heads: number, vocab_subset: number | null, path_input: boolean, 
/**
 * Every this-many-th answer is held out for evaluation.
 */
heldout_every: number, evaluations_per_epoch: number, tune_prompts: number, tune_max_tokens: number, };

export type TrainingPhase = "starting" | "loading_model" | "collecting" | "training" | "writing" | "tuning" | "done";

/**
 * Time spent in one phase (over every attempt of a resumed job).
 */
export type PhaseTime = { phase: TrainingPhase, seconds: number, };

/**
 * Training loss, averaged over the optimizer steps since the point before.
 */
export type LossPoint = { step: number, loss: number, 
/**
 * Each head's own cross-entropy; `null` where a head had no target.
 */
head_losses: Array<number | null>, };

/**
 * The heads on the held-out answers after `step` optimizer steps (step 0: untrained).
 */
export type EvaluationPoint = { step: number, epoch: number, loss: number, top1: Array<number>, top5: Array<number>, 
/**
 * Tokens per step a 64-node tree built from this accuracy would give.
 */
tree_tokens_per_step: number, };

/**
 * How far a job got, and what it measured on the way.
 */
export type TrainingFigures = { 
/**
 * Prompts answered, of `prompts`.
 */
answered: number, prompts: number, answer_tokens: number, epoch: number, epochs: number, 
/**
 * Optimizer steps done, of `steps`.
 */
step: number, steps: number, 
/**
 * Tune prompts measured, of `tune_prompts`.
 */
tuned: number, tune_prompts: number, 
/**
 * What the phase under way still needs, from its pace so far.
 */
seconds_left: number | null, phase_seconds: Array<PhaseTime>, losses: Array<LossPoint>, evaluations: Array<EvaluationPoint>, };

/**
 * What the tune after training found for the new heads on this machine.
 */
export type TuneSummary = { 
/**
 * Tokens per step the tuned tree's nodes were measured to accept along the tune prompts'
 * answers (the tree counted on prompts it was not built from), if it could be counted.
 */
measured_tokens_per_step: number | null, chosen_nodes: number | null, chosen_expected_tokens_per_step: number | null, predicted_speedup: number | null, decision: string, };

/**
 * What a finished job made.
 */
export type TrainingReport = { heads_path: string, file_bytes: number, prompts: number, generated_tokens: number, train_positions: number, heldout_positions: number, untrained_top1: Array<number>, heldout_top1: Array<number>, heldout_top5: Array<number>, 
/**
 * The tree stored with the heads, and the tokens per step it should give.
 */
tree_nodes: number, expected_tokens_per_step: number, 
/**
 * Tokens per step of a 64-node tree from the held-out accuracy.
 */
tree_tokens_per_step: number, tune: TuneSummary | null, };

/**
 * What deleting a training job removed.
 */
export type DeletedTrainingJob = { id: number, 
/**
 * Bytes of collected answers removed from disk (the heads it wrote stay).
 */
freed_bytes: number, };

/**
 * Where a job started now for a model would write its heads.
 */
export type PlannedHeads = { model: string, 
/**
 * `<model>.medusa.gguf` beside the model, or `<model>-2.medusa.gguf` and so on when that
 * name is taken by a file or by another job.
 */
heads_path: string, };

/**
 * A heads training job as stored.
 */
export type TrainingJob = { id: number, uid: string, created_at: string, updated_at: string, status: TrainingStatus, 
/**
 * What it is doing, or where it stopped.
 */
phase: string, 
/**
 * What the job is called: its heads file's name (`m-2.medusa.gguf`), which no other job
 * shares. Derived from `heads_path`, not stored.
 */
name: string, model_name: string, model_path: string, settings: TrainingSettings, 
/**
 * Where its collected answers are kept.
 */
data_path: string | null, 
/**
 * Where its heads go: chosen when it starts, never a file that is already there nor
 * another job's; once it finished, the heads it wrote.
 */
heads_path: string | null, figures: TrainingFigures, report: TrainingReport | null, error: string | null, };

export type TrainingStatus = "running" | "cancelled" | "failed" | "interrupted" | "finished";

/**
 * What tuning measured and decided.
 */
export type TuneReport = { 
/**
 * The decode costs measured for this tune, with their bands.
 */
decode_costs: DecodeCosts, ms_per_head: number, positions: Array<number>, head_top1_accuracy: Array<number>, head_accuracy_by_rank: Array<Array<number>>, plain_tokens_per_second: number, budgets: Array<TunedSize>, 
/**
 * Per budget, the tokens per step its tree really would have yielded on these prompts
 * (the budgets' `expected_tokens` assume heads are right independently of each other).
 */
measured_tokens_per_step: Array<number>, 
/**
 * The Medusa paper's `mc_sim_7b_63` tree on these prompts, for heads deep enough for it.
 */
reference_tree: ReferenceTree | null, 
/**
 * The fastest tree, when one beats plain decoding.
 */
chosen: ChosenTree | null, 
/**
 * The tree of the rank paths most often right on these prompts, as many nodes as the
 * largest size considered.
 */
counted_tree: CountedTree | null, decision: string, };

/**
 * One tree size as the tuner sees it.
 */
export type TunedSize = { nodes: number, expected_tokens: number, 
/**
 * Deepest head the tree uses (heads run one per depth).
 */
depth: number, 
/**
 * Drafting (the heads up to `depth`) plus one decode of the root and the tree.
 */
step_ms: number, tokens_per_second: number, 
/**
 * Over plain decoding (one token per decode of one token).
 */
predicted_speedup: number, 
/**
 * The speed-up at the top and the bottom of the decode costs' measured band.
 */
speedup_low: number, speedup_high: number, };

export type ChosenTree = { nodes: number, expected_tokens_per_step: number, predicted_speedup: number, 
/**
 * Medusa choices: per path, the rank at each depth.
 */
tree: Array<Array<number>>, };

export type ReferenceTree = { name: string, nodes: number, measured_tokens_per_step: number, };

/**
 * A tree of the rank paths that were right most often
 * ([`HeadAccuracy::tree_of_most_accepted_paths`]), which needs no assumption that heads are
 * right independently.
 */
export type CountedTree = { nodes: number, depth: number, 
/**
 * Tokens per step it yields on the prompts it was counted on.
 */
measured_tokens_per_step: number, 
/**
 * Counted on half of the prompts and measured on the other half, both ways, averaged:
 * what to expect on prompts it was not built from. `None` with fewer than two prompts.
 */
cross_checked_tokens_per_step: number | null, 
/**
 * Medusa choices: per path, the rank at each depth.
 */
tree: Array<Array<number>>, };

/**
 * The model files the playground may load, folder by folder.
 */
export type ModelsOnDisk = { 
/**
 * Where downloads are saved (the models cache).
 */
download_dir: string, folders: Array<ModelsFolder>, };

export type ModelsFolder = { path: string, models: Array<DiskModel>, };

/**
 * A GGUF file in one of the folders.
 */
export type DiskModel = { file_name: string, path: string, size_bytes: number, 
/**
 * The weight format its name says, e.g. `Q4_K_M`.
 */
quantization: string | null, 
/**
 * A download that has not finished (`size_bytes` arrived so far); downloading it again
 * resumes.
 */
partial: boolean, 
/**
 * Medusa heads rather than a model.
 */
heads: boolean, 
/**
 * The model or heads running now.
 */
loaded: boolean, 
/**
 * In the download folder, so it may be deleted from here.
 */
deletable: boolean, };

/**
 * Search results, or the suggested models when the search is empty.
 */
export type CatalogSearch = { 
/**
 * The hub asked (`HF_ENDPOINT`, else Hugging Face).
 */
hub: string, suggested: boolean, results: Array<CatalogEntry>, 
/**
 * This machine's memory, which the suggested models are sized against; `None` where the
 * system does not say.
 */
memory_bytes: number | null, };

/**
 * A repository of GGUF files.
 */
export type CatalogEntry = { 
/**
 * `owner/name`.
 */
repo: string, downloads: number | null, likes: number | null, license: string | null, 
/**
 * For suggestions: the parameter count and why it is suggested.
 */
parameters: string | null, note: string | null, };

/**
 * A repository's GGUF files.
 */
export type RepoFiles = { repo: string, license: string | null, files: Array<HubFile>, };

/**
 * One GGUF file of a repository.
 */
export type HubFile = { repo: string, 
/**
 * Path in the repository (`Q4_K_M/model.gguf` in repositories with folders).
 */
path: string, size_bytes: number, 
/**
 * SHA-256 of the content, in hex, where the hub keeps the file in LFS (GGUFs always are).
 */
sha256: string | null, 
/**
 * The weight format its name says, e.g. `Q4_K_M`.
 */
quantization: string | null, 
/**
 * One part of a model split over several files (`-00001-of-00003.gguf`).
 */
split: boolean, };

/**
 * Download a repository's file into the models cache.
 */
export type DownloadRequest = { repo: string, 
/**
 * The file's path in the repository.
 */
file: string, };

/**
 * Deletes a file from the download folder.
 */
export type DeleteModelRequest = { file_name: string, 
/**
 * The unfinished download of that name rather than the model.
 */
partial: boolean, };

/**
 * What a download reports, in order: progress (the first one says where it resumed), then
 * `done` or `failed`.
 */
export type DownloadEvent = { "type": "progress" } & DownloadProgress | { "type": "done" } & Downloaded | { "type": "failed", error: ApiErrorBody, };

/**
 * How far a download has got.
 */
export type DownloadProgress = { 
/**
 * Bytes on disk so far, what an earlier attempt kept included.
 */
downloaded: number, total: number, 
/**
 * Bytes kept from an earlier attempt that this one started from.
 */
resumed_from: number, };

/**
 * A finished download.
 */
export type Downloaded = { path: string, 
/**
 * False when the file was already in the directory.
 */
downloaded: boolean, 
/**
 * Whether the content was checked against a SHA-256 the hub listed.
 */
checksum_verified: boolean, };

/**
 * Filters, order and paging of the run history (listing and export).
 */
export type RunQuery = { mode?: Mode, 
/**
 * Text the model name contains, in any case.
 */
model?: string, 
/**
 * Words the prompt or the answer contains.
 */
search?: string, status?: RunStatus, 
/**
 * A remote engine's name, or `local` for runs of the model served here.
 */
engine?: string, 
/**
 * RFC 3339.
 */
since?: string, until?: string, limit?: number, offset?: number, sort?: SortKey, order?: SortOrder, 
/**
 * Export only: json, jsonl or csv.
 */
format?: ExportFormat, };

/**
 * A page of runs, newest first unless asked otherwise. The runs come without their per-token
 * arrays: a run's own record ([`Playground::get_run`]) and the export have them.
 */
export type RunList = { runs: Array<ListedRun>, 
/**
 * The `offset` of the next page; absent on the last page.
 */
next_offset?: number, };

/**
 * A run as the history lists it: every field of a [`Run`] but its per-token arrays
 * (`token_ids`, `logprobs`), which only the run's own record and the export carry. A run may
 * hold millions of tokens, so a page of a listing would otherwise weigh hundreds of megabytes.
 * Outcome fields are `None` until the run finishes (and stay `None` for runs that failed or
 * were interrupted).
 */
export type ListedRun = { 
/**
 * Local id: differs between databases, unlike `uid`.
 */
id: number, uid: string, status: RunStatus, created_at: string, mode: string, model: ModelRef, heads: HeadsRef | null, 
/**
 * The draft model that drafted beside the model, in draft and auto modes. Exports made
 * before draft models lack it.
 */
draft_model: ModelRef | null, tree: JsonValue | null, prompt: PromptRecord, sampling: JsonValue, max_tokens: number, stop: Array<string>, comparison_id: number | null, queue_ms: number | null, 
/**
 * The remote engine that ran it, by name; `None`: the playground's own model. Exports made
 * before remote engines lack it.
 */
engine: string | null, output: string | null, stop_reason: string | null, prompt_tokens: number | null, tokens_generated: number | null, ttft_ms: number | null, total_ms: number | null, tokens_per_second: number | null, 
/**
 * Exports made before it was kept lack it; their import derives it.
 */
decode_tokens_per_second: number | null, steps: number | null, mean_accepted: number | null, acceptance_by_depth: Array<number> | null, 
/**
 * Drafted tokens on the verified paths and those accepted (llama-server's `draft_n` and
 * `draft_n_accepted`); a remote engine's own report for its runs.
 */
draft_tokens: number | null, accepted_draft_tokens: number | null, seed: number | null, error: string | null, finished_at: string | null, };

/**
 * A stored run: every field the history lists ([`ListedRun`], flattened into the same JSON
 * object) with its per-token arrays. It reads as a `ListedRun` through `Deref`, so that the
 * fields have one definition.
 */
export type RunRecord = { 
/**
 * The generated token ids, in order: the playground's own runs recorded since they were
 * kept.
 */
token_ids: Array<number> | null, 
/**
 * Each generated token's log-probability and the likeliest tokens at its place, kept only
 * for runs that asked for them (rows stay small otherwise).
 */
logprobs?: Array<TokenLogprobRecord>, 
/**
 * Local id: differs between databases, unlike `uid`.
 */
id: number, uid: string, status: RunStatus, created_at: string, mode: string, model: ModelRef, heads: HeadsRef | null, 
/**
 * The draft model that drafted beside the model, in draft and auto modes. Exports made
 * before draft models lack it.
 */
draft_model: ModelRef | null, tree: JsonValue | null, prompt: PromptRecord, sampling: JsonValue, max_tokens: number, stop: Array<string>, comparison_id: number | null, queue_ms: number | null, 
/**
 * The remote engine that ran it, by name; `None`: the playground's own model. Exports made
 * before remote engines lack it.
 */
engine: string | null, output: string | null, stop_reason: string | null, prompt_tokens: number | null, tokens_generated: number | null, ttft_ms: number | null, total_ms: number | null, tokens_per_second: number | null, 
/**
 * Exports made before it was kept lack it; their import derives it.
 */
decode_tokens_per_second: number | null, steps: number | null, mean_accepted: number | null, acceptance_by_depth: Array<number> | null, 
/**
 * Drafted tokens on the verified paths and those accepted (llama-server's `draft_n` and
 * `draft_n_accepted`); a remote engine's own report for its runs.
 */
draft_tokens: number | null, accepted_draft_tokens: number | null, seed: number | null, error: string | null, finished_at: string | null, };

/**
 * Where a run is in its life.
 */
export type RunStatus = "running" | "finished" | "failed" | "cancelled" | "interrupted";

/**
 * The model a run used.
 */
export type ModelRef = { name: string, path: string, 
/**
 * Weight format, e.g. `Q4_1`.
 */
file_type: string, 
/**
 * A fingerprint of the file (hash or similar); empty when unknown.
 */
identity: string, };

/**
 * The Medusa heads a run used.
 */
export type HeadsRef = { path: string, identity: string, };

/**
 * The prompt of a run: raw text to continue, or chat messages for the model's template.
 *
 * Serialised as `{"kind":"text","content":"..."}` or
 * `{"kind":"chat","content":[{"role":"user","content":"..."}]}`.
 */
export type PromptRecord = { "kind": "text", "content": string } | { "kind": "chat", "content": Array<MessageRecord> };

/**
 * One chat message.
 */
export type MessageRecord = { role: 'system' | 'user' | 'assistant', content: string, };

/**
 * A run together with its steps, in step order.
 */
export type RunWithSteps = { run: RunRecord, steps: Array<StepRecord>, };

/**
 * One decoding step of a run.
 */
export type StepRecord = { step_index: number, tree_size: number, tree_depth: number, accepted_len: number, 
/**
 * Tokens emitted by this step.
 */
tokens: Array<number>, 
/**
 * Who produced each emitted token (`model`, `medusa`, `lookup`, ...).
 */
sources: Array<string>, 
/**
 * Whether the draft was accepted at each tree depth.
 */
depth_hits: Array<boolean>, draft_ms: number, verify_ms: number, 
/**
 * What was drafted and what the model made of it; `None` for steps recorded before trees
 * were kept.
 */
tree: StepTreeRecord | null, 
/**
 * Why the step drafted nothing.
 */
skip: DraftSkipRecord | null, 
/**
 * What the draft budget weighed; absent where no budget decided.
 */
decision?: DraftDecisionRecord, };

/**
 * A step's drafted tree as the model judged it.
 */
export type StepTreeRecord = { 
/**
 * The token the tree hangs from.
 */
root: StepTokenRecord, 
/**
 * Parents come before their children.
 */
nodes: Array<DraftNodeRecord>, 
/**
 * The model's own token after the accepted path.
 */
model_token: StepTokenRecord, };

/**
 * A token and its text.
 */
export type StepTokenRecord = { token: number, text: string, };

/**
 * A generated token's log-probability (natural log, the served model's own) and the likeliest
 * tokens at its place, most likely first.
 */
export type TokenLogprobRecord = { token_id: number, text: string, logprob: number, top: Array<TopLogprobRecord>, };

export type TopLogprobRecord = { token_id: number, text: string, logprob: number, };

/**
 * One drafted token.
 */
export type DraftNodeRecord = { token: number, text: string, 
/**
 * Index of its parent in `nodes`; `None` hangs from the root.
 */
parent: number | null, 
/**
 * Who proposed it (`medusa_head_K`, `lookup`).
 */
source: string, 
/**
 * Rank among its proposer's guesses.
 */
rank: number, 
/**
 * A second drafter that proposed the same token here (auto mode); absent in older records.
 */
also_proposed_by?: string, accepted: boolean, };

/**
 * Why a step drafted nothing: a short code and the reason in words.
 */
export type DraftSkipRecord = { reason: string, message: string, };

/**
 * The figures the draft budget weighed for a step.
 */
export type DraftDecisionRecord = { 
/**
 * Tokens the step was expected to yield (1 when nothing was drafted).
 */
expected_tokens: number, 
/**
 * Expected time of the step with its draft, and of a plain step.
 */
step_ms: number, plain_ms: number, evidence: Array<DrafterEvidenceRecord>, };

/**
 * What one drafter's acceptance rate rested on in a step.
 */
export type DrafterEvidenceRecord = { drafter: string, class: number, accepted: number, tried: number, 
/**
 * The lower confidence bound of its acceptance rate that the budget planned with.
 */
cautious_rate: number, proposed: number, drafted: number, };

/**
 * The columns runs can be sorted by. A closed set, so no caller text ever reaches the SQL.
 */
export type SortKey = "created_at" | "tokens_per_second" | "total_ms" | "ttft_ms" | "tokens_generated" | "mean_accepted";

export type SortOrder = "asc" | "desc";

export type ExportFormat = "json" | "jsonl" | "csv";

/**
 * What an import did.
 */
export type ImportReport = { 
/**
 * Runs added, with their steps.
 */
imported: number, 
/**
 * Runs whose uid was already stored; left as they were.
 */
skipped_duplicates: number, 
/**
 * Runs not added because a field is out of range (see `rejections`).
 */
rejected: number, 
/**
 * Why runs were rejected: the first 100.
 */
rejections: Array<ImportRejection>, comparisons_imported: number, 
/**
 * Heads training jobs added (those whose uid was stored already are left as they were).
 */
training_jobs_imported: number, 
/**
 * Comparisons not re-created: a run of theirs is missing from the file or was rejected, or
 * already belongs to a comparison here (typically the same one, imported before).
 */
comparisons_skipped: number, };

/**
 * What a deletion did.
 */
export type DeleteReport = { deleted: number, 
/**
 * Comparisons that lost runs and were measured again from the ones left.
 */
comparisons_changed: Array<number>, 
/**
 * Comparisons left with no run, removed.
 */
comparisons_removed: Array<number>, };

/**
 * One run an import refused.
 */
export type ImportRejection = { uid: string, reason: string, };

export type ComparisonList = { comparisons: Array<Comparison>, };

/**
 * Runs of one prompt in different modes, measured against the `normal` runs among them.
 *
 * The store computes every figure from the stored runs, using only runs with status `finished`
 * (a partial or failed output says nothing about speed or equality). Each mode may be run
 * several times: the k-th run of a mode belongs to round k, and a run's speed-up is its decode
 * speed over the same round's `normal` run. Outputs are checked against the first finished
 * `normal` run.
 */
export type Comparison = { id: number, created_at: string, prompt: PromptRecord, 
/**
 * Member runs in creation order, each with its figures against its round's baseline.
 */
runs: Array<ComparisonMember>, 
/**
 * Rounds: the most runs of any one mode.
 */
repeats: number, 
/**
 * Per mode, in order of first appearance: medians and ranges over the rounds.
 */
modes: Array<ModeFigures>, 
/**
 * The best median speed-up of a non-`normal` mode.
 */
speedup: number | null, 
/**
 * Whether every other run's output equals the baseline's.
 */
outputs_identical: boolean | null, 
/**
 * The earliest character index at which any other run's output departs from the baseline's.
 */
first_difference: number | null, };

/**
 * One mode of a comparison over its rounds.
 */
export type ModeFigures = { mode: string, 
/**
 * Finished runs.
 */
runs: number, 
/**
 * Tokens per second after the first token.
 */
decode_tokens_per_second: Spread | null, 
/**
 * Time to the first token.
 */
ttft_ms: Spread | null, 
/**
 * Median tokens per step; `None` for `normal`.
 */
mean_accepted: number | null, 
/**
 * Drafted tokens over its finished runs; `None` for `normal` and when not reported.
 */
drafted_tokens: number | null, 
/**
 * Drafted tokens per step, whole trees (every node the model checked), over its finished
 * runs' recorded steps; `None` for `normal` and for runs that recorded no steps (remote
 * engines).
 */
drafted_per_step: number | null, 
/**
 * Decode speed over the same round's `normal` run; `None` for `normal`.
 */
speedup: Spread | null, 
/**
 * The speed-ups that what the mode drafted can explain; `None` for `normal` and where its
 * tokens per step are not known.
 */
explainable: SpeedupBounds | null, 
/**
 * `None` for `normal` and without a finished pair.
 */
verdict: SpeedVerdict | null, };

/**
 * The median and range of a figure over a comparison's rounds.
 */
export type Spread = { median: number, min: number, max: number, 
/**
 * How many values.
 */
count: number, };

/**
 * What a mode's speed-up over `normal` means.
 */
export type SpeedVerdict = "faster" | "slower" | "within_noise" | "unexplained" | "barely_drafted" | "rounds_disagree" | "drafted_nothing" | "single_run";

/**
 * How far drafting can move a mode's decode speed from normal's, given what it drafted.
 */
export type SpeedupBounds = { 
/**
 * Every drafted token costing a whole extra token and more, with the drafter's own measured
 * share of each step; `None` where no step was recorded (remote engines).
 */
slowest: number | null, 
/**
 * Every step costing no more than a plain one: its tokens per step.
 */
fastest: number, };

/**
 * One member of a comparison. The figures against the baseline are `None` for `normal` runs
 * and for runs that cannot be compared (not finished, or no finished baseline).
 */
export type ComparisonMember = { run_id: number, mode: string, status: RunStatus, tokens_per_second: number | null, decode_tokens_per_second: number | null, ttft_ms: number | null, mean_accepted: number | null, 
/**
 * Drafted tokens on its verified paths; `None` when not reported.
 */
draft_tokens: number | null, 
/**
 * Which repeat of its mode this run is (0-based).
 */
round: number, 
/**
 * This run's decode speed over its round's `normal` run's.
 */
speedup: number | null, output_identical: boolean | null, 
/**
 * Character index of the first difference from the baseline's output; `None` when equal.
 */
first_difference: number | null, };

/**
 * Which conversations to list: those matching `search` (words of the title or of one message),
 * at most `limit`, the latest changed first.
 */
export type ConversationsQuery = { search?: string, limit?: number, };

export type ConversationList = { conversations: Array<ConversationSummary>, };

/**
 * A conversation as the list shows it.
 */
export type ConversationSummary = { id: number, 
/**
 * Empty until the first prompt names it (the UI says "New chat").
 */
title: string, created_at: string, updated_at: string, message_count: number, 
/**
 * With a search: a piece of the first message that matched, if a message did.
 */
snippet: string | null, };

/**
 * A conversation with its messages in order.
 */
export type Conversation = { id: number, title: string, system_prompt: string, created_at: string, updated_at: string, messages: Array<ConversationMessage>, };

/**
 * One message of a conversation.
 */
export type ConversationMessage = { id: number, role: 'user' | 'assistant', content: string, 
/**
 * The run that wrote this answer (null for prompts, and once that run was deleted).
 */
run_id: number | null, 
/**
 * Its run is still writing it; `content` holds what it wrote so far.
 */
answering: boolean, created_at: string, };

/**
 * What may change in a conversation besides its messages; absent fields stay.
 */
export type ConversationPatch = { title?: string, system_prompt?: string, };

/**
 * The formats a conversation exports to.
 */
export type ConversationExport = "json" | "markdown";

export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]: JsonValue } | null;
