// Convenience: every torch-side SDK interface.
#pragma once

#include "grpo/sdk/torch/advantage.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "grpo/sdk/torch/masked.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "grpo/sdk/torch/rollout_backend.h"
