/* Shared helpers of the model tests: a seeded pi0-tiny, seeded inputs, error metrics (the paths
 * and the temporary directory are tests/pi0testenv.h's). */
#pragma once

#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "inference/io/pi0safetensors.h"
#include "inference/model/pi0config.h"
#include "inference/model/pi0model.h"
#include "inference/model/pi0policy.h"
#include "tests/pi0testenv.h"

namespace pi0test
{

/* One intra-op thread: tiny models gain nothing from more, and on a loaded CI machine spinning
 * OpenMP threads turn milliseconds into seconds. */
inline const bool kSingleThreaded = [] {
  at::set_num_threads (1);
  return true;
}();

inline std::shared_ptr<pi0::Pi0Model>
tiny_model (uint64_t seed = 1)
{
  auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi0-tiny"));
  m->init_random (seed);
  return m;
}

/* A seeded observation for `cfg`: all views valid unless told, `valid_tokens` real tokens. */
inline pi0::PolicyInput
tiny_input (const pi0::Pi0Config &cfg, uint64_t seed, int valid_tokens = 12)
{
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed);
  pi0::PolicyInput in;
  in.images = at::empty ({cfg.num_views, 3, cfg.vision.image_size, cfg.vision.image_size})
                  .uniform_ (-1, 1, gen);
  in.image_masks = at::ones ({cfg.num_views}, at::kBool);
  in.token_mask = at::arange (cfg.max_tokens) < valid_tokens;
  in.tokens = at::randint (1, cfg.vocab_size, {cfg.max_tokens}, gen,
                           at::TensorOptions ().dtype (at::kLong)) *
              in.token_mask;
  in.state = at::empty ({cfg.state_dim}).uniform_ (-1, 1, gen);
  in.noise = at::empty ({cfg.horizon, cfg.action_dim}).normal_ (0, 1, gen);
  return in;
}

/* A LeRobot golden's observation (the io.safetensors of tests/parity/lerobot_pi0 and _pi05).
 * pi0.5's goldens have no state tensor (its model reads none): zeros then. */
inline pi0::PolicyInput
golden_input (const pi0::TensorMap &io)
{
  pi0::PolicyInput in;
  in.images = io.at ("images");
  in.image_masks = io.at ("image_masks");
  in.tokens = io.at ("tokens");
  in.token_mask = io.at ("token_mask");
  in.state = io.count ("state") ? io.at ("state") : at::zeros ({32});
  in.noise = io.at ("noise");
  return in;
}

/* max |a - b| / max |b|: one number that is meaningful for tensors of any scale. */
inline double
rel_err (const at::Tensor &a, const at::Tensor &b)
{
  at::Tensor bf = b.to (at::kDouble).cpu (), af = a.to (at::kDouble).cpu ();
  double denom = bf.abs ().max ().item<double> ();
  return (af - bf).abs ().max ().item<double> () / (denom > 0 ? denom : 1.0);
}

inline double
max_abs (const at::Tensor &a, const at::Tensor &b)
{
  return (a.to (at::kDouble).cpu () - b.to (at::kDouble).cpu ()).abs ().max ().item<double> ();
}

/* One PolicyInput as a batch of one, the model's forward arguments. */
struct Batch {
  at::Tensor images, masks, tokens, token_mask, state, noise;
};

inline Batch
batch_of (const pi0::PolicyInput &in)
{
  return Batch{in.images.unsqueeze (0),     in.image_masks.unsqueeze (0), in.tokens.unsqueeze (0),
               in.token_mask.unsqueeze (0), in.state.unsqueeze (0),       in.noise.unsqueeze (0)};
}

} // namespace pi0test
