"""LoReFT: low-rank representation fine-tuning (Wu et al., 2024) as a steering method.

    lo = geosteer.load("my-loreft", model=model)                  # or the recipe key loreft=my-loreft
    with geosteer.steer(model, lo.with_(strength=0.5)): ...       # s = 0: stock, s = 1: as trained
"""

from geosteer.loreft.artifact import LOREFT, load_loreft, save_loreft
from geosteer.loreft.intervention import LoReFT, loreft_delta
from geosteer.loreft.learn import LoReFTLearnConfig, learn_loreft
from geosteer.loreft.method import METHOD

__all__ = ["LOREFT", "METHOD", "LoReFT", "LoReFTLearnConfig", "learn_loreft", "load_loreft", "loreft_delta",
           "save_loreft"]
