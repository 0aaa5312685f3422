/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The precompiled header of the targets with several LibTorch translation units (meson's
 * cpp_pch: pi0inference, the one library of inference/io and inference/model; test_io;
 * test_model). LibTorch's headers are most of each such file's compile time (about 300,000
 * lines after the preprocessor; a minute and more per file on the CI machine); compiled once per
 * target they are read back in a second.
 * Nothing of ours is here, and every file still includes what it uses. */
#pragma once

#include <torch/torch.h>
