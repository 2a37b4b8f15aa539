// grpo-export: writes a Hugging Face model folder from a PEFT LoRA adapter (a LoRA checkpoint of
// grpo-sft or grpo-run, or any PEFT adapter of a supported architecture) merged into its base
// model: W + scaling * B A for every adapted weight (docs/lora.md).
#pragma once

namespace grpo::cli {

// grpo-export --merge ADAPTER --output DIR [--base MODEL] [--dtype D]; prints what it wrote.
// Exit codes: apps/cli/exit_codes.h (docs/cli.md#grpo-export says which).
int grpo_export_main(int argc, char** argv);

}  // namespace grpo::cli
