/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The names of openpi's robot transforms that pi0::Transforms (inference/model/pi0transforms.h)
 * implements, one per kind of openpi checkpoint config: what pi0infer's `transforms` property,
 * pi0::OpenOptions::transforms and serve/'s mappings ("transforms") take. Here, apart from the
 * implementation, because serve/ checks a mapping's choice without LibTorch; test_transforms
 * checks that every name opens. */

namespace pi0
{

constexpr int kNumTransformNames = 6;
constexpr const char *kTransformNames[kNumTransformNames] = {
    "none",      /* nothing: the model's actions, unnormalized and cut (not an openpi checkpoint) */
    "aloha",     /* pi0_aloha, pi0_aloha_towel, pi0_aloha_tupperware, pi0_aloha_pen_uncap */
    "aloha_sim", /* pi0_aloha_sim: as aloha, without delta actions */
    "libero",    /* pi0_libero: delta actions on the 6 arm dims */
    "libero_absolute", /* pi05_libero (extra_delta_transform=False): LIBERO's 7 dims, absolute */
    "droid",     /* pi0_droid: the first 8 action dims */
};

} // namespace pi0
