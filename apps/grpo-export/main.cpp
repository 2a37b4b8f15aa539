// grpo-export: a LoRA adapter merged into its base, written as a Hugging Face model folder. A
// thin main over grpo_export.cpp (the grpo_cli library).
#include "apps/grpo-export/grpo_export.h"

int main(int argc, char** argv) { return grpo::cli::grpo_export_main(argc, argv); }
