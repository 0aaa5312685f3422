/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "test_helpers.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

TEST (Pi0Meta, ActionMetaAddGet)
{
  pi0test::BufferPtr buf (gst_buffer_new ());
  const gfloat vals[6] = {1, 2, 3, 4, 5, 6};
  GstPi0ActionMeta *m = gst_buffer_add_pi0_action_meta (buf.get (), 3, 2, vals, "m");
  ASSERT_NE (m, nullptr);
  EXPECT_EQ (gst_buffer_get_pi0_action_meta (buf.get ()), m);
  EXPECT_EQ (gst_pi0_action_meta_get_action (m, 2)[1], 6.0f);
}
