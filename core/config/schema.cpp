#include "core/config/schema.h"

#include <cmath>
#include <cstdint>

#include "core/algo/modes.h"
#include "core/config/yaml_loader.h"
#include "core/tokenizer/chat_template.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

// clang-format off
// THE table. One line per key: path, type, default (as YAML), description.
const std::vector<ConfigKeySpec>& config_schema() {
  // A function-local static: safe to use from other translation units' static initializers.
  static const std::vector<ConfigKeySpec> schema = {
    {"run.output_dir",         ConfigType::kString,        "\"runs/grpo\"", "Run directory: the effective configuration and the log are written here (later also metrics and checkpoints).", {}},
    {"run.seed",               ConfigType::kInt,           "1",             "Seed of the run's random number generators.", {}},
    {"run.deterministic",      ConfigType::kBool,          "false",         "Deterministic GPU kernels, so that two runs on the same GPU repeat bit for bit: LibTorch's deterministic algorithms (an op without a deterministic kernel is an error), deterministic cuDNN, fixed cuBLAS workspaces, no attention kernel whose backward uses atomics (docs/gpu.md). CPU runs are bit-reproducible either way.", {}},
    {"run.resume",             ConfigType::kBool,          "false",         "Continue from the latest complete checkpoint in `run.output_dir` (`grpo-run --resume`); one that cannot be loaded (a missing or damaged file) is skipped, with a warning, for the next older one.", {}},
    {"run.resume_from",        ConfigType::kInt,           "0",             "Resume from this step's checkpoint (`grpo-run --resume-from STEP`; implies `run.resume`), with no fallback: a checkpoint that cannot be loaded is an error. 0 = the newest complete checkpoint.", {}},
    {"log.level",              ConfigType::kEnum,          "info",          "Lowest severity that is logged.", {"trace", "debug", "info", "warn", "error"}},
    {"log.file",               ConfigType::kString,        "\"run.log\"",   "Log file, relative to `run.output_dir`; `\"\"` disables the file log.", {}},
    {"log.samples_every",      ConfigType::kInt,           "10",            "grpo-run writes sampled trajectories (prompt, turns, tool calls and observations, reward, advantage) of every N-th step to `samples.jsonl` in the run directory (the first step too); 0 = never. See docs/tools.md.", {}},
    {"log.samples_per_step",   ConfigType::kInt,           "4",             "Trajectories written per logged step: the first sample of each of the step's first groups.", {}},
    {"plugins.paths",          ConfigType::kStringList,    "[]",            "Directories searched first for `libgrpo_<name>.so`.", {}},
    {"plugins.load",           ConfigType::kStringList,    "[]",            "Plugin files (paths) or plugin names loaded at start-up.", {}},
    {"verifiers",              ConfigType::kComponentList, "[]",            "Reward verifiers: each entry has a `name`, an optional `weight` (a number, default 1.0), an optional `label` (a row label or a list of them: the rows the entry scores, instead of the rows labelled with its name; several entries of one verifier, e.g. python_reward, serve different datasets) and the verifier's own options.", {}},
    {"tools",                  ConfigType::kComponentList, "[]",            "Tools the policy may call in its rollouts (docs/tools.md): each entry has a `name` (a tool component: `calculator`, `python`, or a plugin's), an optional `as` (the name the policy calls it by; default the component's) and the tool's own options. Empty: no tool rollouts.", {}},
    {"algorithm.advantage",    ConfigType::kComponent,     "null",          "Advantage estimator component.", {}},
    {"algorithm.policy_loss",  ConfigType::kComponent,     "null",          "Policy loss component.", {}},
    {"algorithm.kl_estimator", ConfigType::kComponent,     "null",          "KL estimator component.", {}},
    {"algorithm.kl_coef",      ConfigType::kNumber,        "0.0",           "KL coefficient: beta of the KL penalty in the loss, or the reward coefficient with `kl_in_reward`. 0 = no KL term, and no reference model is loaded.", {}},
    {"algorithm.kl_in_reward", ConfigType::kBool,          "false",         "Put the KL penalty into the token rewards (verl `use_kl_in_reward`) instead of the loss.", {}},
    {"algorithm.loss_aggregation", ConfigType::kEnum,      "token-mean",    "How per-token losses become the loss; denominators are global over micro-batches and ranks. See docs/algorithms.md.", loss_aggregation_names()},
    {"algorithm.mismatch_correction.mode", ConfigType::kEnum, "none",       "Rollout/trainer log-prob mismatch correction: importance weights exp(old - rollout) that multiply the per-token loss.", mismatch_mode_names()},
    {"algorithm.mismatch_correction.max", ConfigType::kNumber, "2.0",       "Upper bound C of the importance weight (truncate: clamp to C; mask: weight 0 above C).", {}},
    {"algorithm.mismatch_correction.min", ConfigType::kNumber, "0.0",       "Lower bound of the importance weight in the mask modes (weight 0 below it).", {}},
    {"algorithm.mismatch_correction.log_ratio_clamp", ConfigType::kNumber, "10.0", "Bound of the log-ratio before exp(): weights stay within [e^-c, e^c].", {}},
    {"algorithm.mismatch_correction.sequence_reduction", ConfigType::kEnum, "sum", "How the sequence modes combine the per-token log-ratios: `sum` (the sequence's likelihood ratio) or `mean`.", sequence_reduction_names()},
    {"algorithm.filter_zero_std_groups", ConfigType::kBool, "true",         "Drop groups whose rewards are all equal (zero advantage, no gradient) before packing; `other/real_batch_size_ratio` reports the share kept (open-instruct `filter_zero_std_samples`).", {}},
    {"algorithm.active_sampling", ConfigType::kBool,       "false",         "Keep generating batches of new prompts until the step has `rollout.num_unique_prompts` groups with non-zero reward spread (DAPO dynamic sampling; needs `filter_zero_std_groups`).", {}},
    {"algorithm.active_sampling_max_batches", ConfigType::kInt, "4",        "Bound of active sampling: at most this many generation batches per step; the step then trains on what it has (a warning says so).", {}},
    {"rollout.backend",        ConfigType::kComponent,     "null",          "Rollout (generation) backend component. The trainer fills in the backend's `model`, `tokenizer`, `dtype` and `logprobs` (`scaled`) options from `model.*`/`tokenizer.*` when they are not given.", {}},
    {"rollout.num_unique_prompts", ConfigType::kInt,       "16",            "Prompts per training step (open-instruct `num_unique_prompts_rollout`).", {}},
    {"rollout.num_samples_per_prompt", ConfigType::kInt,   "8",             "Completions per prompt: the group size (open-instruct `num_samples_per_prompt_rollout`).", {}},
    {"rollout.temperature",    ConfigType::kNumber,        "1.0",           "Sampling temperature of training rollouts; the trainer's log-probs use the same temperature.", {}},
    {"rollout.top_p",          ConfigType::kNumber,        "1.0",           "Nucleus sampling bound in (0, 1].", {}},
    {"rollout.top_k",          ConfigType::kInt,           "-1",            "Top-k sampling (-1 = off).", {}},
    {"rollout.min_p",          ConfigType::kNumber,        "0.0",           "Min-p sampling (0 = off).", {}},
    {"rollout.max_new_tokens", ConfigType::kInt,           "256",           "Response length limit (open-instruct `response_length`); also Dr.GRPO's constant denominator and the overlong shaping's limit.", {}},
    {"rollout.max_prompt_tokens", ConfigType::kInt,        "256",           "Longest rendered prompt, in tokens; longer prompts are dropped when the data is loaded (counted in the log).", {}},
    {"rollout.stop_strings",   ConfigType::kStringList,    "[]",            "Stop strings besides the model's EOS tokens (cut from the text).", {}},
    {"rollout.tools.parser",   ConfigType::kEnum,          "hermes",        "How tool calls are written: `hermes` (`<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>`, Qwen2.5/Qwen3/Hermes) or `legacy` (open-instruct's `<python>code</python>`: the tool's name as a tag around its one string argument).", {"hermes", "legacy"}},
    {"rollout.tools.max_calls", ConfigType::kInt,          "5",             "Tool calls per trajectory; a turn that calls a tool after that ends the trajectory.", {}},
    {"rollout.tools.timeout_s", ConfigType::kNumber,       "10.0",          "Time limit of one tool call, enforced by the host; a call past it gives the policy a time-out observation.", {}},
    {"rollout.tools.observation", ConfigType::kString,     "\"auto\"",      "How a tool's output is wrapped for the policy: `auto` (legacy: `<output>\\n...\\n</output>\\n`; hermes: the chat template's tool turn, or `<tool_response>\\n...\\n</tool_response>\\n` without one) or a text with `{output}` in it.", {}},
    {"rollout.tools.max_observation_tokens", ConfigType::kInt, "512",       "An observation longer than this many tokens is cut.", {}},
    {"rollout.tools.reuse_kv_cache", ConfigType::kBool,    "true",          "Resume a trajectory after a tool call in the backend with its KV cache kept (RolloutBackend::generate_turns); false, or a backend without it: re-send prompt + trajectory as a new request (the prefix is recomputed).", {}},
    {"rollout.tools.resume_as_ready", ConfigType::kBool,   "false",         "Resume a sample as soon as its tools answered, while others decode (slow tools overlap generation more; the batches then depend on the tools' timing, so runs are not reproducible bit for bit). false: parked samples resume together when nothing else is left to decode, in a fixed order (exact resume holds).", {}},
    {"rollout.tools.num_threads", ConfigType::kInt,        "0",             "Tool pool workers (tool calls of different samples run concurrently); 0 = 4 x the hardware threads.", {}},
    {"rollout.async_steps",    ConfigType::kInt,           "1",             "Generation runs ahead of training on its own thread, at most this many policy versions behind the trainer; 0 = fully synchronous (on-policy).", {}},

    {"model.path",             ConfigType::kString,        "\"\"",        "Policy model: a Hugging Face folder (config.json + model.safetensors or a sharded index), or a run directory of `grpo-sft`/`grpo-run` (its newest complete checkpoint); `\"\"` = none. See docs/models.md.", {}},
    {"model.dtype",            ConfigType::kEnum,          "float32",       "Dtype the policy's weights are stored in: loaded, updated by the optimizer and checkpointed. `train.precision` chooses the compute dtype (docs/precision.md).", {"float32", "bfloat16"}},
    {"model.device",           ConfigType::kString,        "\"cpu\"",       "Where the policy, the reference model, the update and the optimizer state live: `cpu`, `cuda` (data-parallel: each rank binds `cuda:LOCAL_RANK`) or `cuda:N`. The native rollout backend's `device` defaults to it. CUDA needs a build against a CUDA LibTorch (docs/precision.md).", {}},
    {"model.attention",        ConfigType::kEnum,          "auto",          "Attention kernel of the policy, the reference model and the native rollout engine (its `attention` option defaults to this): `eager` (matmuls + a float32 softmax, transformers' eager path: the reference), `sdpa` (LibTorch's scaled_dot_product_attention: flash / memory-efficient kernels on CUDA), `flash_varlen` (FlashAttention-2's variable-length kernel for packed training rows on CUDA in bf16; other layouts use sdpa), `auto` (the fastest that supports the layer: flash_varlen, then sdpa, then eager). A layer a kernel cannot run (Gemma 2's soft-capping, float32 for flash) falls back, said once in the log. docs/gpu.md.", {"auto", "eager", "sdpa", "flash_varlen"}},
    {"model.lora.r",           ConfigType::kInt,           "null",          "LoRA rank (PEFT's `r`, >= 1): setting it trains low-rank adapters on the frozen base weights instead of every weight; `null` = full fine-tuning. The checkpoints are then PEFT adapter folders. See docs/lora.md.", {}},
    {"model.lora.lora_alpha",  ConfigType::kNumber,        "8",             "LoRA scale numerator: the update is `lora_alpha / r * B A x` (PEFT's default 8).", {}},
    {"model.lora.lora_dropout", ConfigType::kNumber,       "0.0",           "Dropout on the adapters' input in training passes (PEFT's `lora_dropout`), in [0, 1).", {}},
    {"model.lora.target_modules", ConfigType::kStringList, "[]",            "Modules that get adapters, as PEFT matches them (a name such as `q_proj`, or a suffix such as `self_attn.q_proj`), or `all-linear` (every linear layer of the decoder layers; `lm_head` cannot be adapted); `[]` = PEFT's default for Qwen2/Qwen3/Llama, `[q_proj, v_proj]`.", {}},
    {"model.lora.init_lora_weights", ConfigType::kEnum,    "true",          "Adapter A's initialization: `true` (Kaiming-uniform, PEFT's default) or `gaussian` (normal, std 1/r); B starts at 0 in both, so step 0 is the base model.", {"true", "gaussian"}},
    {"model.lora.use_rslora",  ConfigType::kBool,          "false",         "Rank-stabilized LoRA: scale by `lora_alpha / sqrt(r)` instead of `lora_alpha / r`.", {}},
    {"model.lora.adapter_path", ConfigType::kString,       "\"\"",          "A PEFT adapter folder (adapter_config.json + adapter_model.safetensors, e.g. a LoRA checkpoint of grpo-sft or grpo-run) to continue training from; its r, lora_alpha, use_rslora and target_modules apply (a value set here that differs is an error).", {}},
    {"tokenizer.path",         ConfigType::kString,        "\"\"",        "Folder with tokenizer.json (+ tokenizer_config.json), or a tokenizer.json file; `\"\"` = `model.path`.", {}},
    {"tokenizer.chat_template", ConfigType::kString,       "\"auto\"",          "Chat template prompts are rendered with: `auto` (the model's own: `chat_template.jinja` or `tokenizer_config.json`'s `chat_template`; the built-in `chatml` when it has none), a built-in `chatml` (Qwen), `llama3` or `none` (plain text), or the path of a Jinja file. See docs/tokenizer.md.", {}},
    {"tokenizer.chat_template_kwargs", ConfigType::kMap,   "{}",            "More variables for the chat template, as transformers' `apply_chat_template(**kwargs)` (TRL's `chat_template_kwargs`), e.g. `{enable_thinking: false}` for Qwen3; unquoted YAML scalars keep their YAML types (true, 3, 0.5, null), quoted ones are strings.", {}},
    {"data.train",             ConfigType::kDataSources,   "[]",            "Training data: JSONL files, each a path or `{path: P, weight: W}` (W x the file's rows, open-instruct's fraction; > 1 repeats rows) or `{path: P, count: N}`. See docs/training.md#data.", {}},
    {"data.eval",              ConfigType::kDataSources,   "[]",            "Evaluation split, same forms as `data.train`; `[]` = no evaluation.", {}},
    {"data.format",            ConfigType::kEnum,          "auto",          "Column convention of the rows: `open_instruct` (`messages`, `ground_truth`, `dataset`), `trl` (`prompt`, every other column to the verifiers), `verl` (`prompt`, `data_source`, `reward_model.ground_truth`), or `auto` (per row, by the columns present).", {"auto", "open_instruct", "trl", "verl"}},
    {"data.prompt_column",     ConfigType::kString,        "\"\"",        "Column holding the prompt (a string or a chat list); `\"\"` = the format's own (`messages` or `prompt`). A dotted path reaches into objects.", {}},
    {"data.ground_truth_column", ConfigType::kString,      "\"\"",        "Column holding the ground truth; `\"\"` = the format's own (`ground_truth`, `reward_model.ground_truth`).", {}},
    {"data.dataset_column",    ConfigType::kString,        "\"\"",        "Column naming the verifier of a row (a string, or a list aligned with a list of ground truths); `\"\"` = the format's own (`dataset`, `data_source`). A row without it is scored by every verifier.", {}},
    {"data.completion_column", ConfigType::kString,        "\"\"",        "Column holding the supervised target of `grpo-sft` (a string, or a chat list ending with the assistant's message); `\"\"` = `completion` (trl) or the chat's trailing assistant message (open_instruct).", {}},
    {"data.skip_bad_rows",     ConfigType::kBool,          "false",         "A malformed row is a counted warning instead of an error naming file and line.", {}},
    {"data.shuffle",           ConfigType::kBool,          "true",          "Shuffle the training rows each epoch (seeded by `run.seed` and the epoch).", {}},
    {"reward.verification_reward", ConfigType::kNumber,    "10.0",          "A verifier's score in [0, 1] is multiplied by this and by the verifier's `weight`; the scores of several verifiers on one sample add up (open-instruct).", {}},
    {"reward.format_verifier", ConfigType::kString,        "\"\"",        "Name of a configured verifier that judges the format (e.g. `format`); its score gates or adds to the other verifiers' reward, see `reward.format_mode`. `\"\"` = none.", {}},
    {"reward.format_mode",     ConfigType::kEnum,          "gate",          "`gate`: the reward counts only when the format verifier scores >= 0.5 (open-instruct's default); `additive`: its weighted score is added.", {"gate", "additive"}},
    {"reward.non_stop_penalty", ConfigType::kBool,         "false",         "A completion cut at the length limit gets `reward.non_stop_penalty_value` instead of its reward.", {}},
    {"reward.non_stop_penalty_value", ConfigType::kNumber, "0.0",           "The reward of a completion that did not stop, with `reward.non_stop_penalty`.", {}},
    {"reward.overlong_buffer", ConfigType::kInt,           "0",             "DAPO overlong shaping: responses longer than `max_new_tokens - buffer` lose up to `overlong_penalty_factor` linearly; 0 = off.", {}},
    {"reward.overlong_penalty_factor", ConfigType::kNumber, "1.0",          "Largest overlong penalty (reached at `max_new_tokens`).", {}},
    {"reward.mask_truncated_completions", ConfigType::kBool, "false",       "Completions that hit the length limit enter no loss term (their advantage still counts in the group statistics).", {}},
    {"reward_model.path",      ConfigType::kString,        "\"\"",        "A learned reward model next to the verifiers: a Hugging Face *ForSequenceClassification folder with one label (config.json, weights, tokenizer.json), e.g. Skywork-Reward-Llama-3.1-8B, of any family in docs/models.md. It scores every completion, rendered with its own chat template; see docs/models.md. `\"\"` = none.", {}},
    {"reward_model.weight",    ConfigType::kNumber,        "1.0",           "The reward model's (normalized) score times this is added to each sample's reward, next to the verifiers' (`reward.verification_reward` does not scale it).", {}},
    {"reward_model.normalize", ConfigType::kEnum,          "none",          "`batch`: standardize the scores over each generation batch of each rank (mean 0, std 1) before the weight; `none`: raw scores.", {"none", "batch"}},
    {"reward_model.batch_size", ConfigType::kInt,          "8",             "Sequences per scoring forward pass of the reward model.", {}},
    {"reward_model.max_tokens", ConfigType::kInt,          "0",             "Longest sequence the reward model scores; a longer one keeps its first token (BOS) and its last tokens (where the score is read). 0 = the reward model's max_position_embeddings.", {}},
    {"reward_model.chat_template", ConfigType::kString,    "\"auto\"",    "How the reward model renders (prompt, completion): `auto` (its own tokenizer's template; none is an error), a built-in name, or a Jinja file.", {}},
    {"reward.num_threads",     ConfigType::kInt,           "0",             "Verifier thread pool size; 0 = the number of hardware threads.", {}},
    {"reward.timeout_s",       ConfigType::kNumber,        "30.0",          "Seconds a verifier call may take; a later answer is ignored, the sample scores 0 and `reward/verifier_timeouts` counts it.", {}},
    {"train.steps",            ConfigType::kInt,           "100",           "Training steps (one rollout batch and its policy updates each).", {}},
    {"train.learning_rate",    ConfigType::kNumber,        "1e-6",          "Peak AdamW learning rate.", {}},
    {"train.lr_schedule",      ConfigType::kEnum,          "constant",      "Learning-rate schedule over optimizer steps after warmup.", {"constant", "linear", "cosine"}},
    {"train.warmup_steps",     ConfigType::kInt,           "0",             "Optimizer steps of linear warmup from 0 to the peak rate.", {}},
    {"train.min_lr_ratio",     ConfigType::kNumber,        "0.0",           "Final rate of the linear and cosine schedules, as a fraction of the peak.", {}},
    {"train.weight_decay",     ConfigType::kNumber,        "0.0",           "AdamW decoupled weight decay.", {}},
    {"train.adam_beta1",       ConfigType::kNumber,        "0.9",           "AdamW beta1.", {}},
    {"train.adam_beta2",       ConfigType::kNumber,        "0.999",         "AdamW beta2.", {}},
    {"train.adam_eps",         ConfigType::kNumber,        "1e-8",          "AdamW epsilon.", {}},
    {"train.max_grad_norm",    ConfigType::kNumber,        "1.0",           "Gradient-norm clipping bound (global L2 norm); 0 = no clipping (the norm is still reported).", {}},
    {"train.num_epochs",       ConfigType::kInt,           "1",             "Passes over each rollout batch.", {}},
    {"train.num_mini_batches", ConfigType::kInt,           "1",             "Optimizer steps per pass: the rollout batch is split into this many mini-batches of whole groups.", {}},
    {"train.precision",        ConfigType::kEnum,          "auto",          "Training precision: `fp32`; `bf16-mixed` (float32 master weights, gradients and AdamW state, forward and backward matmuls in bfloat16, log-probs and the loss in float32; needs model.dtype float32); `bf16` (bfloat16 weights and AdamW, no master copy; needs model.dtype bfloat16); `auto` = fp32 or bf16 following model.dtype. Under bf16-mixed the native rollout backend runs bfloat16 weights. See docs/precision.md.", {"auto", "fp32", "bf16-mixed", "bf16"}},
    {"train.per_device_train_batch_size", ConfigType::kInt, "1",            "Packed rows per micro-batch (one forward/backward); micro-batches accumulate into a mini-batch.", {}},
    {"train.pack_length",      ConfigType::kInt,           "2048",          "Tokens per packed row (prompt + response sequences back to back, attention confined to each); must hold `rollout.max_prompt_tokens + rollout.max_new_tokens`.", {}},
    {"train.old_logprobs",     ConfigType::kEnum,          "auto",          "Log-probs of the policy that produced the rollout: `recompute` (a trainer forward before the updates), `rollout` (the backend's), `auto` (recompute when `num_mini_batches` or `num_epochs` > 1 or rollouts are stale, else the first pass's own log-probs, detached).", {"auto", "recompute", "rollout"}},
    {"train.logprob_chunk_tokens", ConfigType::kInt,       "1024",          "Tokens per chunk of the log-prob/entropy computation (peak memory ~ chunk x vocab floats).", {}},
    {"train.ref_update_freq",  ConfigType::kInt,           "0",             "Polyak-update the reference model every N steps: ref = (1 - alpha) ref + alpha policy; 0 = frozen.", {}},
    {"train.ref_update_alpha", ConfigType::kNumber,        "0.6",           "alpha of the reference model's Polyak update.", {}},
    {"train.router_aux_loss_coef", ConfigType::kNumber,  "0.0",           "Mixture-of-experts policies (Qwen2-MoE, Qwen3-MoE): coefficient of the routers' load-balancing loss (transformers' load_balancing_loss_func over every MoE layer) added to the training loss; `loss/router_aux_avg` reports it. 0 = off, as transformers trains by default; the checkpoints' own config.json suggests a value (`router_aux_loss_coef`, e.g. 0.001). Not with `train.gradient_checkpointing`.", {}},
    {"train.gradient_checkpointing", ConfigType::kBool,  "false",         "Activation checkpointing: training forwards keep only each decoder layer's input and backward recomputes the layer (about 1/3 more compute, activation memory of one layer instead of all); `grpo-run` and `grpo-sft`. See docs/distributed.md.", {}},
    {"train.max_nonfinite_steps", ConfigType::kInt,        "3",             "A non-finite loss or gradient skips the optimizer step; this many in a row stop the run (after a checkpoint) with an error.", {}},
    {"sft.steps",              ConfigType::kInt,           "300",           "`grpo-sft`: optimizer steps of supervised training (the optimizer, schedule and packing keys are `train.*`).", {}},
    {"sft.batch_size",         ConfigType::kInt,           "64",            "`grpo-sft`: sequences (prompt + completion) per optimizer step; the loss is the mean over their completion tokens.", {}},
    {"sft.init",               ConfigType::kEnum,          "pretrained",    "`grpo-sft`: start from the weights in `model.path` (`pretrained`) or from random weights (`random`: normal with config.json's `initializer_range`, seeded by `run.seed`; the folder needs only config.json and the tokenizer).", {"pretrained", "random"}},
    {"sft.eval_every",         ConfigType::kInt,           "0",             "`grpo-sft`: held-out completion loss (`eval/loss`, on `data.eval` rows with completions) every N steps and after the last; 0 = only after the last.", {}},
    {"eval.every",             ConfigType::kInt,           "0",             "Evaluate on `data.eval` every N steps (and after the last step); 0 = only after the last step.", {}},
    {"eval.at_start",          ConfigType::kBool,          "true",          "Also evaluate before the first step (the baseline).", {}},
    {"eval.num_samples",       ConfigType::kInt,           "1",             "Completions per eval prompt (n of pass@k).", {}},
    {"eval.pass_k",            ConfigType::kInt,           "1",             "k of the unbiased pass@k estimator 1 - C(n-c, k)/C(n, k); <= `eval.num_samples`.", {}},
    {"eval.temperature",       ConfigType::kNumber,        "0.0",           "Eval sampling temperature (0 = greedy).", {}},
    {"eval.max_prompts",       ConfigType::kInt,           "0",             "Evaluate on the first N rows of the eval split; 0 = all.", {}},
    {"checkpoint.save_freq",   ConfigType::kInt,           "0",             "Save a checkpoint every N steps (and after the last step); 0 = only after the last step.", {}},
    {"checkpoint.keep_last",   ConfigType::kInt,           "2",             "Complete checkpoints kept in the run directory (older ones are deleted); 0 = keep all.", {}},
    {"dist.launcher",          ConfigType::kEnum,          "auto",          "Where the rank and world size come from: `torchrun` (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`; also `grpo-run --nproc`), `slurm` (`SLURM_PROCID`, ... inside `srun`), `mpi` (`OMPI_COMM_WORLD_*`), `none` (one process), or `auto` (the first of these whose variables are set). See docs/distributed.md.", {"auto", "torchrun", "slurm", "mpi", "none"}},
    {"dist.backend",           ConfigType::kEnum,          "auto",          "c10d process-group backend: `gloo` (CPU), `nccl` (CUDA builds), or `auto` (NCCL when the policy is on a GPU, else Gloo).", {"auto", "gloo", "nccl"}},
    {"dist.timeout_s",         ConfigType::kNumber,        "1800",          "A collective (or the rendezvous) that waits longer than this for a peer fails, naming the lost rank; keep it above the longest gap between steps (evaluation, a checkpoint save).", {}},
    {"dist.heartbeat_s",       ConfigType::kNumber,        "1.0",           "Period of each rank's heartbeat in the rendezvous store; a failed collective waits about 3 of them to tell which rank is lost.", {}},
    {"dist.sharding",          ConfigType::kEnum,          "none",          "Sharded data parallel: `optimizer` (ZeRO-1: each rank keeps the AdamW state of 1/N of the trainable values and all-gathers the updated values), `gradients` (ZeRO-2: also gradients reduced to their owner instead of all-reduced, full gradients freed after), `full` (ZeRO-3: also the parameters sharded at rest, each decoder layer all-gathered for its forward and backward and freed after), `none` (every rank holds everything). Checkpoints hold one optimizer shard per rank; resume with the same world size. See docs/distributed.md.", {"none", "optimizer", "gradients", "full"}},
    {"dist.bucket_mb",         ConfigType::kNumber,        "25",            "Gradient all-reduce bucket size in MiB; buckets are launched while backward still runs.", {}},
    {"generate.n",             ConfigType::kInt,           "1",             "`grpo-generate`: completions per prompt (`--n`). grpo-generate reads only the `generate:` block of its `--config` file; its flags override the block.", {}},
    {"generate.temperature",   ConfigType::kNumber,        "1.0",           "`grpo-generate`: sampling temperature; 0 = greedy (`--temperature`).", {}},
    {"generate.top_p",         ConfigType::kNumber,        "1.0",           "`grpo-generate`: nucleus sampling bound in (0, 1]; 1 = off (`--top-p`).", {}},
    {"generate.top_k",         ConfigType::kInt,           "-1",            "`grpo-generate`: keep the k most likely tokens; -1 = off (`--top-k`).", {}},
    {"generate.min_p",         ConfigType::kNumber,        "0.0",           "`grpo-generate`: drop tokens less likely than min_p x the most likely one, in [0, 1]; 0 = off (`--min-p`).", {}},
    {"generate.max_new_tokens", ConfigType::kInt,          "256",           "`grpo-generate`: completion length limit in tokens (`--max-new-tokens`).", {}},
    {"generate.seed",          ConfigType::kInt,           "0",             "`grpo-generate`: random seed >= 0; prompt i (0-based, input order) samples with seed + i (`--seed`).", {}},
    {"generate.stop",          ConfigType::kStringList,    "[]",            "`grpo-generate`: stop strings; a completion ends at one, which is cut from its text (`--stop`).", {}},
    {"generate.stop_token_ids", ConfigType::kIntList,      "[]",            "`grpo-generate`: stop token ids; a completion ends with one, which is kept (`--stop-token-id`).", {}},
    {"generate.chat_template", ConfigType::kString,        "\"auto\"",          "`grpo-generate`: chat template the prompts are rendered with, as `tokenizer.chat_template`: `auto`, `chatml`, `llama3`, `none` (a prompt is tokenized as written) or a Jinja file (`--chat-template`).", {}},
    {"generate.chat_template_kwargs", ConfigType::kMap,    "{}",            "`grpo-generate`: more chat template variables, as `tokenizer.chat_template_kwargs` (e.g. `{enable_thinking: false}`).", {}},
    {"generate.backend",       ConfigType::kComponent,     "null",          "`grpo-generate`: rollout backend component and its options, e.g. `{name: native, max_num_seqs: 16}`; null = `native` (`--backend`, `--backend-option`).", {}},
  };
  return schema;
}
// clang-format on

namespace {

using sdk::ConfigError;
using sdk::ConfigValue;
using sdk::SourceLocation;

const char* const kDefaultSource = "<default>";

std::string join_key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

bool is_section_path(const std::string& path) {
  if (path.empty()) return true;
  for (const auto& spec : config_schema())
    if (starts_with(spec.path, path + ".")) return true;
  return false;
}

// Full key paths one level below `section` ("" for the root), in table order, deduplicated.
std::vector<std::string> keys_below(const std::string& section) {
  std::vector<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& spec : config_schema()) {
    std::string_view path = spec.path;
    if (!starts_with(path, prefix)) continue;
    std::size_t dot = path.find('.', prefix.size());
    std::string child(path.substr(0, dot));
    bool seen = false;
    for (const auto& k : out) seen = seen || k == child;
    if (!seen) out.push_back(child);
  }
  return out;
}

[[noreturn]] void fail(const SourceLocation& loc, const std::string& path, const std::string& message) {
  std::string where = loc.to_string();
  throw ConfigError((where.empty() ? "" : where + ": ") + (path.empty() ? "" : path + ": ") + message);
}

const char* const kComponentForms = "a component is written `NAME` or as a map `{name: NAME, ...options}`";

void check_component(const ConfigValue& v, const std::string& path, bool in_list) {
  if (v.is_null()) {
    if (in_list) fail(v.location(), path, std::string("expected a component, got null (") + kComponentForms + ")");
    return;
  }
  if (v.is_scalar()) {
    if (v.scalar().empty()) fail(v.location(), path, "expected a component name, got \"\"");
    return;
  }
  if (!v.is_map())
    fail(v.location(), path, std::string("expected a component, got ") + v.type_description() + " (" + kComponentForms + ")");
  const ConfigValue* name = v.find("name");
  if (!name) fail(v.location(), path, std::string("component map has no 'name' (") + kComponentForms + ")");
  if (!name->is_scalar() || name->scalar().empty())
    fail(name->location(), path + ".name", "expected a component name, got " + sdk::detail::describe_value(*name));
  if (in_list) {
    if (const ConfigValue* weight = v.find("weight")) {
      double w = 0;
      if (!weight->is_scalar() || !sdk::detail::parse_double(weight->scalar(), &w) || !std::isfinite(w))
        fail(weight->location(), path + ".weight", "expected a finite number, got " + sdk::detail::describe_value(*weight));
    }
  }
}

const char* const kDataSourceForms = "a data file is written `PATH` or as a map `{path: PATH, weight: W}` or `{path: PATH, count: N}`";

void check_data_source(const ConfigValue& v, const std::string& path) {
  if (v.is_scalar()) {
    if (v.scalar().empty()) fail(v.location(), path, "expected a file path, got \"\"");
    return;
  }
  if (!v.is_map()) fail(v.location(), path, std::string("expected a data file, got ") + v.type_description() + " (" + kDataSourceForms + ")");
  const ConfigValue* file = v.find("path");
  if (!file) fail(v.location(), path, std::string("data file map has no 'path' (") + kDataSourceForms + ")");
  if (!file->is_scalar() || file->scalar().empty())
    fail(file->location(), path + ".path", "expected a file path, got " + sdk::detail::describe_value(*file));
  const ConfigValue* weight = v.find("weight");
  const ConfigValue* count = v.find("count");
  if (weight && count) fail(count->location(), path, "give either 'weight' or 'count', not both");
  if (weight) {
    double w = 0;
    if (!weight->is_scalar() || !sdk::detail::parse_double(weight->scalar(), &w) || !std::isfinite(w) || w <= 0)
      fail(weight->location(), path + ".weight", "expected a finite number > 0, got " + sdk::detail::describe_value(*weight));
  }
  if (count) {
    std::int64_t n = 0;
    if (!count->is_scalar() || !sdk::detail::parse_int(count->scalar(), &n) || n < 1)
      fail(count->location(), path + ".count", "expected an integer >= 1, got " + sdk::detail::describe_value(*count));
  }
  for (const auto& e : v.entries())
    if (e.key != "path" && e.key != "weight" && e.key != "count") {
      std::string where = e.key_location.to_string();
      throw ConfigError((where.empty() ? "" : where + ": ") + "unknown key '" + path + "." + e.key + "'" +
                        did_you_mean(e.key, {"path", "weight", "count"}));
    }
}

void check_value(const ConfigKeySpec& spec, const ConfigValue& v, const std::string& path) {
  const std::string got = sdk::detail::describe_value(v);
  switch (spec.type) {
    case ConfigType::kBool: {
      bool b = false;
      if (!v.is_scalar() || !sdk::detail::parse_bool(v.scalar(), &b))
        fail(v.location(), path, "expected true or false, got " + got);
      return;
    }
    case ConfigType::kInt: {
      if (v.is_null() && std::string(spec.default_yaml) == "null") return;  // an optional integer (model.lora.r)
      std::int64_t i = 0;
      if (!v.is_scalar() || !sdk::detail::parse_int(v.scalar(), &i))
        fail(v.location(), path, "expected an integer, got " + got);
      return;
    }
    case ConfigType::kNumber: {
      double d = 0;
      if (!v.is_scalar() || !sdk::detail::parse_double(v.scalar(), &d))
        fail(v.location(), path, "expected a number, got " + got);
      return;
    }
    case ConfigType::kString:
      if (!v.is_scalar()) fail(v.location(), path, "expected a string, got " + got);
      return;
    case ConfigType::kEnum: {
      if (v.is_scalar())
        for (const auto& c : spec.choices)
          if (v.scalar() == c) return;
      std::string hint = v.is_scalar() ? did_you_mean(v.scalar(), spec.choices) : "";
      fail(v.location(), path, "expected one of " + join(spec.choices, ", ") + ", got " + got + hint);
    }
    case ConfigType::kStringList:
      if (v.is_null() || v.is_scalar()) return;
      if (!v.is_sequence()) fail(v.location(), path, "expected a list of strings, got " + got);
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        const ConfigValue& item = v.items()[i];
        if (!item.is_scalar())
          fail(item.location(), path + "[" + std::to_string(i) + "]",
               "expected a string, got " + sdk::detail::describe_value(item));
      }
      return;
    case ConfigType::kIntList: {
      auto check_int = [](const ConfigValue& item, const std::string& item_path) {
        std::int64_t i = 0;
        if (!item.is_scalar() || !sdk::detail::parse_int(item.scalar(), &i))
          fail(item.location(), item_path, "expected an integer, got " + sdk::detail::describe_value(item));
      };
      if (v.is_null()) return;
      if (v.is_scalar()) return check_int(v, path);
      if (!v.is_sequence()) fail(v.location(), path, "expected a list of integers, got " + got);
      for (std::size_t i = 0; i < v.items().size(); ++i) check_int(v.items()[i], path + "[" + std::to_string(i) + "]");
      return;
    }
    case ConfigType::kComponent:
      check_component(v, path, false);
      return;
    case ConfigType::kDataSources:
      if (v.is_null()) return;
      if (!v.is_sequence()) fail(v.location(), path, "expected a list of data files, got " + got);
      for (std::size_t i = 0; i < v.items().size(); ++i) check_data_source(v.items()[i], path + "[" + std::to_string(i) + "]");
      return;
    case ConfigType::kMap:
      if (!v.is_null() && !v.is_map()) fail(v.location(), path, "expected a map of names to values, got " + got);
      return;
    case ConfigType::kComponentList:
      if (v.is_null()) return;
      if (!v.is_sequence()) fail(v.location(), path, "expected a list of components, got " + got);
      for (std::size_t i = 0; i < v.items().size(); ++i)
        check_component(v.items()[i], path + "[" + std::to_string(i) + "]", true);
      return;
  }
}

void validate_section(const ConfigValue& map, const std::string& section) {
  for (const auto& e : map.entries()) {
    const std::string path = join_key(section, e.key);
    if (const ConfigKeySpec* spec = find_config_key(path)) {
      check_value(*spec, e.value, path);
    } else if (is_section_path(path)) {
      if (!e.value.is_map())
        fail(e.value.location(), path, "expected a map, got " + sdk::detail::describe_value(e.value));
      validate_section(e.value, path);
    } else {
      std::string where = e.key_location.to_string();
      throw ConfigError((where.empty() ? "" : where + ": ") + "unknown key '" + path + "'" +
                        did_you_mean(path, keys_below(section)));
    }
  }
}

ConfigValue* find_path(ConfigValue& root, const std::string& dotted) {
  ConfigValue* cur = &root;
  std::size_t start = 0;
  while (cur) {
    std::size_t dot = dotted.find('.', start);
    std::string seg = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    cur = cur->is_map() ? cur->find(seg) : nullptr;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

void expand_shorthand(ConfigValue& v) {
  if (!v.is_scalar()) return;
  SourceLocation loc = v.location();
  ConfigValue map = ConfigValue::make_map(loc);
  map.set("name", v, loc);
  v = std::move(map);
}

std::string type_column(const ConfigKeySpec& spec) {
  if (spec.type != ConfigType::kEnum) return config_type_name(spec.type);
  std::vector<std::string> quoted;
  for (const auto& c : spec.choices) quoted.push_back("`" + c + "`");
  return "one of " + join(quoted, ", ");
}

std::string table_cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

const char* config_type_name(ConfigType type) {
  switch (type) {
    case ConfigType::kBool: return "bool";
    case ConfigType::kInt: return "int";
    case ConfigType::kNumber: return "number";
    case ConfigType::kString: return "string";
    case ConfigType::kEnum: return "enum";
    case ConfigType::kStringList: return "list of strings";
    case ConfigType::kIntList: return "list of integers";
    case ConfigType::kComponent: return "component";
    case ConfigType::kComponentList: return "list of components";
    case ConfigType::kDataSources: return "list of data sources";
    case ConfigType::kMap: return "map";
  }
  return "?";
}

const ConfigKeySpec* find_config_key(const std::string& path) {
  for (const auto& spec : config_schema())
    if (path == spec.path) return &spec;
  return nullptr;
}

ConfigNodeKind config_node_kind(const std::string& path) {
  if (const ConfigKeySpec* spec = find_config_key(path))
    return spec->type == ConfigType::kComponent ? ConfigNodeKind::kComponent : ConfigNodeKind::kValue;
  if (is_section_path(path)) return ConfigNodeKind::kSection;
  // "verifiers[3]": an item of a component list.
  std::size_t bracket = path.rfind('[');
  if (bracket != std::string::npos && path.back() == ']' && bracket + 2 < path.size() &&
      path.find_first_not_of("0123456789", bracket + 1) == path.size() - 1) {
    const ConfigKeySpec* list = find_config_key(path.substr(0, bracket));
    if (list && list->type == ConfigType::kComponentList) return ConfigNodeKind::kComponent;
  }
  return ConfigNodeKind::kUnknown;
}

namespace {
ConfigValue build_defaults() {
  const SourceLocation loc{kDefaultSource, 0, 0};
  ConfigValue root = ConfigValue::make_map(loc);
  for (const auto& spec : config_schema()) {
    ConfigValue value = parse_yaml(spec.default_yaml, kDefaultSource);
    relocate(value, loc);
    ConfigValue* cur = &root;
    std::string_view path = spec.path;
    std::size_t start = 0;
    for (std::size_t dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.', start)) {
      std::string seg(path.substr(start, dot - start));
      ConfigValue* next = cur->find(seg);
      cur = next ? next : &cur->set(seg, ConfigValue::make_map(loc), loc);
      start = dot + 1;
    }
    cur->set(std::string(path.substr(start)), std::move(value), loc);
  }
  return root;
}
}  // namespace

sdk::ConfigValue default_config() {
  // Built once (parsing the table's YAML defaults); callers get their own copy.
  static const ConfigValue defaults = build_defaults();
  return defaults;
}

void validate_config(const sdk::ConfigValue& root) {
  if (!root.is_map())
    fail(root.location(), "", std::string("expected a map of configuration keys at the top level, got ") +
                                  sdk::detail::describe_value(root));
  validate_section(root, "");
}

void validate_config_section(const sdk::ConfigValue& node, const std::string& section) {
  if (!node.is_map()) fail(node.location(), section, "expected a map, got " + sdk::detail::describe_value(node));
  validate_section(node, section);
}

void normalize_config(sdk::ConfigValue& root) {
  for (const auto& spec : config_schema()) {
    ConfigValue* v = find_path(root, spec.path);
    if (!v) continue;
    switch (spec.type) {
      case ConfigType::kComponent:
        expand_shorthand(*v);
        break;
      case ConfigType::kComponentList:
        if (v->is_null()) *v = ConfigValue::make_sequence(v->location());
        if (v->is_sequence())
          for (auto& item : v->items()) expand_shorthand(item);
        break;
      case ConfigType::kDataSources:
        if (v->is_null()) *v = ConfigValue::make_sequence(v->location());
        if (v->is_sequence())
          for (auto& item : v->items())
            if (item.is_scalar()) {
              ConfigValue map = ConfigValue::make_map(item.location());
              map.set("path", item, item.location());
              item = std::move(map);
            }
        break;
      case ConfigType::kStringList:
      case ConfigType::kIntList:
        if (v->is_null()) {
          *v = ConfigValue::make_sequence(v->location());
        } else if (v->is_scalar()) {
          ConfigValue list = ConfigValue::make_sequence(v->location());
          list.items().push_back(std::move(*v));
          *v = std::move(list);
        }
        break;
      default:
        break;
    }
  }
}

std::string config_reference_markdown() {
  std::string md;
  md += "# Configuration reference\n\n";
  md += "<!-- Generated from the schema table in core/config/schema.cpp; do not edit by hand.\n"
        "     Regenerate: GRPO_UPDATE_DOCS=1 grpo_tests --gtest_filter=ConfigReference.DocsFileIsCurrent -->\n\n";
  md += "A run's configuration is built in layers, each overriding the one before: the built-in\n"
        "defaults listed below, then every `--config FILE` in the order given (a later file wins),\n"
        "then every `--set KEY=VALUE` in the order given. Maps merge key by key; scalars and lists\n"
        "replace. The result is validated before anything starts: an unknown key or a value of the\n"
        "wrong type is an error naming the file, line, column and key path (with a suggestion for\n"
        "misspelled keys). The effective configuration is written to the run directory.\n\n";

  md += "## Keys\n";
  std::vector<std::string> sections;
  for (const auto& spec : config_schema()) {
    std::string_view path = spec.path;
    std::string section(path.substr(0, path.find('.')));
    bool seen = false;
    for (const auto& s : sections) seen = seen || s == section;
    if (!seen) sections.push_back(section);
  }
  for (const auto& section : sections) {
    md += "\n### " + section + "\n\n";
    md += "| Key | Type | Default | Description |\n";
    md += "|---|---|---|---|\n";
    for (const auto& spec : config_schema()) {
      std::string_view path = spec.path;
      if (path != section && !starts_with(path, section + ".")) continue;
      md += "| `" + std::string(path) + "` | " + table_cell(type_column(spec)) + " | `" + table_cell(spec.default_yaml) +
            "` | " + table_cell(spec.doc) + " |\n";
    }
  }

  md += "\n## Value types\n\n";
  md += "- **bool**: `true` or `false` (also `yes`/`no`, `on`/`off`).\n"
        "- **int**: a decimal integer. **number**: an integer or decimal (`1e-6`, `.inf`).\n"
        "- **string**: any scalar; quote it (`\"007\"`) to keep YAML from reading it as something else.\n"
        "- **list of strings**: `[a, b]` or a block list; a single string counts as a one-element list.\n"
        "- **list of integers**: `[1, 2]` or a block list; a single integer counts as a one-element list.\n"
        "- `null` (or an empty value) means \"none\" for lists and components; it is not accepted\n"
        "  for the other types.\n";

  md += "\n## Component nodes\n\n";
  md += "Keys of type *component* select a component (built in or from a plugin) by name and\n"
        "configure it. Three forms are accepted:\n\n"
        "```yaml\n"
        "algorithm:\n"
        "  advantage: null               # no component\n"
        "  kl_estimator: k3              # shorthand for {name: k3}\n"
        "  policy_loss:                  # a map with a required `name`; every other key is an option\n"
        "    name: ppo_clip\n"
        "    clip_high: 0.28\n"
        "```\n\n"
        "Options are validated by the component itself when it is created, before training starts:\n"
        "an option it does not know is an error. A later layer that names the same component (or\n"
        "no name) adds or changes options; one that names a different component replaces the node.\n"
        "A *list of components* holds such nodes; each verifier entry may also carry `weight` (a\n"
        "number, default 1.0):\n\n"
        "```yaml\n"
        "verifiers:\n"
        "  - math                        # weight 1.0, default options\n"
        "  - name: format\n"
        "    weight: 0.5\n"
        "```\n";

  md += "\n## `--set` syntax\n\n";
  md += "`--set KEY=VALUE` sets one key after all `--config` files, and may be repeated (applied in\n"
        "order). `KEY` is a dotted path; a numeric segment indexes a list (one past the end appends).\n"
        "`VALUE` is parsed as YAML, so flow lists and maps work; an empty value is null. Quote the\n"
        "whole assignment for the shell when it holds spaces, brackets or quotes.\n\n"
        "```sh\n"
        "--set run.seed=3\n"
        "--set log.level=debug\n"
        "--set 'plugins.paths=[/opt/grpo/plugins, ./build/plugins]'\n"
        "--set 'algorithm.policy_loss={name: ppo_clip, clip_high: 0.28}'\n"
        "--set algorithm.kl_estimator=k3\n"
        "--set verifiers.0.weight=2\n"
        "--set 'run.output_dir=\"007\"'\n"
        "```\n\n"
        "A map value merges into the node at `KEY` like a `--config` layer: a section keeps its other\n"
        "keys, a component keeps its options unless the map names a different component. Errors in\n"
        "a `--set` name it by position, e.g. `--set #2: unknown key 'run.sed' (did you mean 'run.seed'?)`.\n";
  return md;
}

void relocate(sdk::ConfigValue& v, const sdk::SourceLocation& loc) {
  v.set_location(loc);
  for (auto& item : v.items()) relocate(item, loc);
  for (auto& e : v.entries()) {
    e.key_location = loc;
    relocate(e.value, loc);
  }
}

}  // namespace grpo::core
