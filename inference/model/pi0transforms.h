/* openpi's robot transforms: what an openpi checkpoint's training config does to the robot's
 * state before normalization and to the model's actions after it (openpi's "data transforms":
 * src/openpi/training/config.py, src/openpi/transforms.py, src/openpi/policies/<robot>_policy.py).
 * A checkpoint trained with them makes actions in its own space (ALOHA: deltas of pi's joint
 * angles); without them the robot gets the wrong actions. open_policy() applies them around
 * the norm stats, in openpi's order:
 *
 *   robot state -> state_in -> Normalize -> model -> Unnormalize -> actions_out -> robot actions
 *
 * The sets, by openpi config (common/pi0transformnames.h lists the names):
 *
 *   aloha      pi0_aloha, pi0_aloha_towel, pi0_aloha_tupperware, pi0_aloha_pen_uncap:
 *              AlohaInputs/AlohaOutputs(adapt_to_pi=True) and DeltaActions/AbsoluteActions
 *              with make_bool_mask(6, -1, 6, -1)
 *   aloha_sim  pi0_aloha_sim: AlohaInputs/AlohaOutputs(adapt_to_pi=True), absolute actions
 *   libero     pi0_libero (extra_delta_transform=True): DeltaActions/AbsoluteActions with
 *              make_bool_mask(6, -1); LiberoOutputs keeps 7 dims
 *   libero_absolute  pi05_libero (extra_delta_transform=False): LiberoOutputs keeps 7 dims,
 *              absolute actions
 *   droid      pi0_droid, pi05_droid: DroidOutputs keeps 8 dims (DroidInputs' state is the
 *              mapping's concatenation of joints and gripper)
 *   none       nothing (a model that is not an openpi checkpoint)
 *
 * adapt_to_pi maps ALOHA's joints and grippers to the space of pi's internal runtime that the
 * base model was trained in: joints 1, 2, 8 and 9 change sign, the grippers (dims 6 and 13) go
 * from ALOHA's normalized linear position to pi's normalized angle on the way in
 * (Interbotix's linear-to-angle formula) and from pi's angle to ALOHA's normalized joint
 * angle on the way out. Delta actions: the model's masked dims are offsets from the current
 * (transformed) state, added back after Unnormalize; grippers stay absolute.
 *
 * Computed in float64, as numpy computes openpi's (tests/libs/inference/test_transforms.cpp checks them
 * against openpi's own code run on the same arrays: tests/parity/openpi_transforms/). One
 * difference: openpi adds the state after a Normalize/Unnormalize round trip (float64, at most
 * a few ulps); this adds the transformed state itself. Plain C++: no LibTorch, no GStreamer.
 * Errors are pi0::Error, written to be shown as is. */
#pragma once

#include <string>
#include <vector>

namespace pi0
{

class Transforms
{
public:
  /* "none" (also ""), "aloha", "aloha_sim", "libero", "libero_absolute", "droid"; else
   * pi0::Error naming them. */
  static Transforms by_name (const std::string &name);
  Transforms (); /* none */

  const std::string &name () const { return name_; }
  bool none () const { return robot_ == Robot::None; }
  /* The robot's action dims the outputs keep: 14 (ALOHA), 7 (LIBERO), 8 (DROID); 0 for none. */
  int action_dims () const { return action_dims_; }
  /* The robot state of openpi's example for these transforms (ALOHA 14, LIBERO 8, DROID 8; a
   * missing state is this many zeros); 0 for none. */
  int state_dims () const { return state_dims_; }
  /* pi0::Error unless a state of @dims values can go through: ALOHA's exactly 14, delta actions
   * at least the mask's dims. */
  void check_state (int dims) const;

  /* The robot state as the model side sees it before Normalize (AlohaInputs' state). */
  std::vector<double> state_in (const std::vector<double> &state) const;

  /* The model's actions after Unnormalize, row-major [rows, cols] with cols >= action_dims(),
   * to the robot's [rows, action_dims()]: AbsoluteActions with @model_state (what state_in()
   * gave), then the robot's outputs (ALOHA's conversion, the cut to action_dims()). */
  std::vector<double> actions_out (const std::vector<double> &actions, int rows, int cols,
                                   const std::vector<double> &model_state) const;

  /* The inverse: the robot's actions [rows, action_dims()] as the model side holds them before
   * Normalize (openpi's training inputs: AlohaInputs' actions, then DeltaActions). Real-time
   * chunking's prefix goes this way (docs/rtc.md). */
  std::vector<double> actions_in (const std::vector<double> &actions, int rows, int cols,
                                  const std::vector<double> &model_state) const;

private:
  enum class Robot { None, Aloha, Libero, Droid };
  void check_actions (int rows, int cols, size_t size, bool out) const;

  std::string name_ = "none";
  Robot robot_ = Robot::None;
  bool adapt_to_pi_ = false;
  std::vector<bool> delta_mask_; /* make_bool_mask(...): the dims that are deltas */
  int action_dims_ = 0;
  int state_dims_ = 0;
};

/* openpi's make_bool_mask: make_bool_mask({6, -1}) is six true, one false. */
std::vector<bool> make_bool_mask (const std::vector<int> &dims);

} // namespace pi0
