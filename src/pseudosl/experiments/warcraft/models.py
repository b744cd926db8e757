"""The Warcraft models (paper appendix): a ResNet-18 that predicts every edge at once, and a CNN-LSTM.

ResNet-18 (He et al. 2016; torchvision cannot be installed here, so it is written out): the
standard ImageNet layout, a 7 x 7 stride-2 stem and a 3 x 3 stride-2 max-pool, then four stages of
two BasicBlocks (3 x 3 conv, BN, ReLU, 3 x 3 conv, BN, identity or 1 x 1 stride-2 shortcut) with
``64 w, 128 w, 256 w, 512 w`` channels (``w`` the width multiplier, 1 = ResNet-18) and strides
1, 2, 2, 2; global average pooling gives a ``512 w`` vector.  A 96 x 96 map (12 x 12 grid) leaves the
stages at 24, 12, 6 and 3 pixels.  We keep all four stages: Pogančić et al. truncate after the first
stage and pool to the k x k grid because they predict one weight per cell for a solver, but here the
network predicts the path itself (a vector over edges), which needs a global view.

* :class:`EdgeResNet` (``resnet``, ``resnet_sl``): ResNet-18 -> ``Linear(512 w, E)``: one Bernoulli
  logit per edge, ``(B, E)``; the edges are independent given the map.
* :class:`CNNLSTM` (``lstm``, ``lstm_psl``): ResNet-18 -> ``Linear(512 w, 128)`` embedding ``z``,
  then :class:`pseudosl.RecurrentDecoder` (one LSTM layer, hidden 512, values {0, 1}, length E)
  generates the edges in :func:`~pseudosl.constraints.grid_edges` order.  ``z`` sets the LSTM's
  initial state (``context``) and is fed again at every step, next to the previous edge's value
  and a learned embedding of the step's position (``step_inputs``, ``128 + pos_dim``).  The position
  embedding is our addition: without it the LSTM must count 264 steps to know which edge it is on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pseudosl.psl import RecurrentDecoder, RecurrentEngine

from ..structured import Fit, StructuredModel

__all__ = ["ResNet18", "EdgeResNet", "CNNLSTM", "build_model", "normalize"]


def normalize(maps: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(B, H, W, 3)`` uint8 -> ``(B, 3, H, W)`` floats in [-1, 1]."""
    # contiguous: a channels-last view sends small convolutions down a oneDNN path that corrupts memory
    # in the backward (torch 2.13 CPU, 4-channel stems)
    return maps.permute(0, 3, 1, 2).contiguous().to(dtype).div(127.5).sub(1.0)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 feature extractor: ``(B, 3, H, W)`` -> ``(B, 512 w)`` (see the module docs)."""

    def __init__(self, width: float = 1.0) -> None:
        super().__init__()
        if not width > 0:
            raise ValueError(f"width must be > 0, got {width!r}")
        ch = [max(1, round(c * width)) for c in (64, 128, 256, 512)]
        self.stem = nn.Sequential(nn.Conv2d(3, ch[0], 7, 2, 3, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, c_in = [], ch[0]
        for i, c in enumerate(ch):
            blocks += [BasicBlock(c_in, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)]
            c_in = c
        self.blocks = nn.Sequential(*blocks)
        self.out_dim = ch[-1]

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.stem(x)).mean((2, 3))


class EdgeResNet(StructuredModel):
    """ResNet-18 -> one Bernoulli logit per edge: ``maps (B, H, W, 3) uint8 -> (B, E)``."""

    def __init__(self, n_edges: int, width: float = 1.0) -> None:
        super().__init__()
        self.encoder = ResNet18(width)
        self.head = nn.Linear(self.encoder.out_dim, n_edges)

    def forward(self, maps: Tensor) -> Tensor:
        return self.head(self.encoder(normalize(maps, self.head.weight.dtype)))

    @torch.no_grad()
    def predict(self, maps: Tensor) -> Tensor:
        """Greedy decoding: every edge whose probability is above 0.5, ``(B, E)`` long."""
        return (self(maps) > 0).long()

    def fit(self, maps: Tensor, edges: Tensor) -> Fit:
        """The negative log-likelihood of the label path per map (binary cross-entropy summed over its E edges, mean
        over the batch: the per-map scale of the SL / PSL, which are -log of a probability per map)."""
        logits = self(maps)                                                  # (B, E) Bernoulli logits
        return Fit(F.binary_cross_entropy_with_logits(logits, edges.float(), reduction="sum") / maps.shape[0], logits)

    def greedy(self, maps: Tensor) -> Tensor:
        return self.predict(maps)

    def log_probs(self, maps: Tensor) -> Tensor:
        return F.logsigmoid(self(maps))                                      # (B, E) log q(edge on | map)


class CNNLSTM(StructuredModel):
    """ResNet-18 encoder to a 128-d embedding, then an LSTM decoder over the E edges."""

    autoregressive = True

    def __init__(self, n_edges: int, width: float = 1.0, embed: int = 128, hidden: int = 512,
                 pos_dim: int = 32) -> None:
        super().__init__()
        self.encoder = ResNet18(width)
        self.embed = nn.Linear(self.encoder.out_dim, embed)
        self.pos = nn.Parameter(torch.randn(n_edges, pos_dim) * 0.1) if pos_dim else None
        self.decoder = RecurrentDecoder(n_values=2, length=n_edges, hidden_size=hidden, num_layers=1, cell="lstm",
                                        context_dim=embed, step_dim=embed + pos_dim)

    def conditioning(self, maps: Tensor) -> tuple[Tensor, Tensor]:
        """``context (B, 128)`` and ``step_inputs (B, E, 128 + pos_dim)``."""
        z = self.embed(self.encoder(normalize(maps, self.embed.weight.dtype)))
        steps = z[:, None].expand(-1, self.decoder.length, -1)
        if self.pos is not None:
            steps = torch.cat([steps, self.pos[None].expand(z.shape[0], -1, -1)], -1)
        return z, steps

    def forward(self, maps: Tensor, edges: Tensor) -> Tensor:
        """Teacher-forced logits ``(B, E, 2)`` of the edge vectors ``edges (B, E)``."""
        ctx, steps = self.conditioning(maps)
        return self.decoder.step_logits(edges, context=ctx, step_inputs=steps)

    @torch.no_grad()
    def generate(self, maps: Tensor, greedy: bool = True) -> Tensor:
        """Edge vectors ``(B, E)`` long, greedy (argmax edge by edge) or sampled."""
        ctx, steps = self.conditioning(maps)
        return self.decoder.sample(context=ctx, step_inputs=steps, greedy=greedy)

    def predict(self, maps: Tensor) -> Tensor:
        return self.generate(maps, greedy=True)

    def engine(self, maps: Tensor) -> RecurrentEngine:
        """The decoder's exact local conditionals ``p(y_i | y_-i, map)`` (for the pseudo-semantic loss)."""
        ctx, steps = self.conditioning(maps)
        return self.decoder.engine(ctx, steps)

    def fit(self, maps: Tensor, edges: Tensor) -> Fit:
        """Teacher-forced negative log-likelihood of the label path per map (summed over its E edges, mean over the
        batch); the PSL reuses the map's encoding (``context``, ``step_inputs``)."""
        ctx, steps = self.conditioning(maps)                                 # (B, 128), (B, E, 128 + pos)
        logits = self.decoder.step_logits(edges, ctx, steps)                 # teacher forcing, (B, E, 2)
        loss = F.cross_entropy(logits.reshape(-1, 2), edges.reshape(-1), reduction="sum") / maps.shape[0]
        return Fit(loss, None, (ctx, steps))

    def greedy(self, maps: Tensor) -> Tensor:
        return self.generate(maps, greedy=True)

    def psl_inputs(self, fit: Fit, m: int) -> tuple[Tensor, RecurrentEngine]:
        # the decoder's exact local conditionals p(y_i | y_-i, map), (m, E, 2), and its sample y ~ p(. | map), (m, E),
        # drawn as the conditionals are computed: in eval mode (dropout off), whatever the module's mode
        ctx, steps = fit.conditioning
        engine = self.decoder.engine(ctx[:m], steps[:m])
        return engine.sample(), engine


def build_model(name: str, cfg, n_edges: int) -> nn.Module:
    """``resnet`` / ``resnet_sl`` -> :class:`EdgeResNet`; ``lstm`` / ``lstm_psl`` -> :class:`CNNLSTM`."""
    if name in ("resnet", "resnet_sl"):
        return EdgeResNet(n_edges, cfg.width)
    if name in ("lstm", "lstm_psl"):
        return CNNLSTM(n_edges, cfg.width, cfg.embed_dim, cfg.lstm_hidden, cfg.pos_dim)
    raise ValueError(f"unknown model {name!r}; choose from resnet, resnet_sl, lstm, lstm_psl")
