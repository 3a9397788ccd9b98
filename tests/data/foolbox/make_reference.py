"""Writes torchvision_sha256.json: torchvision's preprocessing of the images here.

Run in an environment with torchvision (not a dependency of rsjax):
``python make_reference.py`` from this folder. It also writes gray_541.jpg and
cmyk_541.jpg (once; they are committed).
"""

import hashlib
import json
import os

import numpy as np
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets.folder import pil_loader

HERE = os.path.dirname(os.path.abspath(__file__))


def derived():
  src = Image.open(os.path.join(HERE, "imagenet_10_541.jpg")).crop((100, 50, 400, 250))
  for name, mode in (("gray_541.jpg", "L"), ("cmyk_541.jpg", "CMYK")):
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
      src.convert(mode).save(path, quality=90)


def main():
  derived()
  geometry = T.Compose([T.Resize(256), T.CenterCrop(224)])
  import PIL

  out = {"torchvision": __import__("torchvision").__version__, "images": {}}
  out["pillow"] = PIL.__version__  # torchvision decodes and resizes with it
  for name in sorted(os.listdir(HERE)):
    if not name.endswith((".jpg", ".png")):
      continue
    image = pil_loader(os.path.join(HERE, name))
    if name.startswith("cifar10_"):  # CIFAR10 gives the 32 x 32 image itself
      tensor, uint8 = T.ToTensor()(image), np.asarray(image)
    else:
      cropped = geometry(image)
      tensor, uint8 = T.ToTensor()(cropped), np.asarray(cropped)
    hwc = tensor.permute(1, 2, 0).contiguous().numpy()
    assert hwc.dtype == np.float32 and uint8.dtype == np.uint8
    out["images"][name] = {
      "shape": list(hwc.shape),
      "float32_sha256": hashlib.sha256(hwc.tobytes()).hexdigest(),
      "uint8_sha256": hashlib.sha256(np.ascontiguousarray(uint8).tobytes()).hexdigest(),
    }
  with open(os.path.join(HERE, "torchvision_sha256.json"), "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")


if __name__ == "__main__":
  main()
