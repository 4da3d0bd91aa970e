"""What both the reference sampler's tests and the device sampler's read: a fixed logits row, the sampling
settings worth drawing under, and a chi-square check of draws against the exact distribution the host sampler
draws from (luminal.nn.models.generation.allowed_probabilities)."""

import numpy as np
from scipy import stats

from luminal.nn.models.generation import allowed_probabilities
from luminal.runtime.sampling import RowSampling

VOCAB = 12
ROW = (np.random.default_rng(0).normal(size=VOCAB) * 2).astype(np.float32)  # no ties: both top-p rules agree
SETTINGS = {  # id -> (temperature, top_k, top_p)
    "tempered": (0.8, 0, 1.0),
    "top-k": (1.0, 4, 1.0),
    "top-p": (1.0, 0, 0.7),
    "all three": (1.3, 6, 0.8),
}
DRAWS = 2000


def draws_of(setting: str, key: int = 7) -> tuple[np.ndarray, list[RowSampling]]:
    """DRAWS rows of ROW, each its own draw (counter) of one key's stream."""
    temperature, top_k, top_p = SETTINGS[setting]
    rows = [RowSampling(temperature, top_p, top_k, key, counter) for counter in range(DRAWS)]
    return np.repeat(ROW[None], DRAWS, axis=0), rows


def assert_drawn_from(tokens: np.ndarray, setting: str) -> None:
    """The tokens never leave the allowed set and their counts fit its exact probabilities (chi-square)."""
    temperature, top_k, top_p = SETTINGS[setting]
    probs = allowed_probabilities(ROW[None], temperature, top_k or None, top_p)[0]
    counts = np.bincount(tokens, minlength=VOCAB)
    assert counts[probs == 0].sum() == 0, (counts, probs)
    allowed = probs > 0
    p_value = stats.chisquare(counts[allowed], DRAWS * probs[allowed]).pvalue
    assert p_value > 1e-3, (setting, counts, DRAWS * probs, p_value)
