#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Reference resizes for tests/libs/kernels/test_kernels.cpp, computed by the libraries Pi0 users run.

usage: resize_oracle.py MODE OUT_H OUT_W FRAME...
  MODE   openpi: openpi_client.image_tools.resize_with_pad (PIL bilinear, antialiased)
         torch:  torch.nn.functional.interpolate(bilinear, align_corners=False,
                 antialias=False) to openpi's resized size, pasted centred on black
  FRAME  PATH:H:W, a raw H x W x 3 uint8 RGB file; writes PATH.out:
         openpi: OUT_H x OUT_W x 3 uint8; torch: OUT_H x OUT_W x 3 float32 (0..255 scale)
Exit code 3 (with a message on stderr) when a needed package is missing.
"""
import sys


def main():
    mode, out_h, out_w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    try:
        import numpy as np
        if mode == "openpi":
            from openpi_client import image_tools
        else:
            import torch
            import torch.nn.functional as F
    except ImportError as e:
        print(f"missing package: {e}", file=sys.stderr)
        return 3

    for spec in sys.argv[4:]:
        path, h, w = spec.rsplit(":", 2)
        h, w = int(h), int(w)
        img = np.fromfile(path, dtype=np.uint8).reshape(h, w, 3)
        if mode == "openpi":
            out = image_tools.resize_with_pad(img[None], out_h, out_w)[0]
            assert out.dtype == np.uint8 and out.shape == (out_h, out_w, 3)
            out.tofile(path + ".out")
        else:
            # openpi's pad geometry, written here on its own so the test checks ours.
            ratio = max(w / out_w, h / out_h)
            rh, rw = int(h / ratio), int(w / ratio)
            t = torch.from_numpy(img.astype(np.float32)).permute(2, 0, 1)[None]
            r = F.interpolate(t, size=(rh, rw), mode="bilinear", align_corners=False,
                              antialias=False)[0]
            canvas = torch.zeros(3, out_h, out_w, dtype=torch.float32)
            top, left = int((out_h - rh) / 2), int((out_w - rw) / 2)
            canvas[:, top:top + rh, left:left + rw] = r
            canvas.permute(1, 2, 0).contiguous().numpy().astype(np.float32).tofile(path + ".out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
