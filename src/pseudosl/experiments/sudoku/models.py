"""The four Sudoku models of the paper's Table 1 (two networks; the losses differ).

Shapes are for the paper's 9 x 9 boards; a board of side ``s`` (``size``: 4, 6 or 9) has ``s**2`` cells
and ``s`` digits in place of 81 and 9.

* ``ConvNet``: non-autoregressive; all 81 cells at once from the puzzle one-hot
  ``(B, 10, 9, 9)`` (channel 0 = blank, channels 1..9 = digits) -> logits ``(B, 81, 9)``.
  Residual 3x3 convolutions, then a linear layer over the flattened feature map so
  every cell sees the whole board.  ConvNet + SL adds the semantic loss on these logits.
* ``SudokuRNN``: :class:`pseudosl.RecurrentDecoder` (Elman RNN, tanh, hidden 128,
  5 layers, dropout 0.2) that writes the 81 digits in row-major order.  It is conditioned
  on the puzzle twice:

  - context: the flattened puzzle one-hot ``(B, 810)`` -> initial hidden state of every layer;
  - step input ``t``: one-hot of the previous digit (9, as in the paper) concatenated with
    the puzzle one-hot of cell ``t`` (10: blank or given digit).

  The paper states input size 9; the 10 extra step inputs are our addition: without them
  the RNN must recall the given digit of cell ``t`` from an initial state 81 steps back,
  which a 128-unit Elman RNN does poorly, so it would spend its capacity on copying.
  RNN + PSL adds the pseudo-semantic loss around a sample from the model; ``rnn_own``, its control, the
  cross-entropy of the solution after the model's own sample (:meth:`SudokuRNN.prefix_nll`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pseudosl.psl import RecurrentDecoder

from ..structured import Fit, StructuredModel

__all__ = ["ConvNet", "SudokuRNN", "puzzle_one_hot", "build_model"]


def puzzle_one_hot(puzzles: Tensor, size: int = 9, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(B, size**2)`` digits with 0 = blank -> ``(B, size**2, size + 1)`` one-hot of ``dtype`` (the model's)."""
    return F.one_hot(puzzles, size + 1).to(dtype)


class ConvNet(StructuredModel):
    def __init__(self, channels: int = 64, layers: int = 6, dropout: float = 0.0, size: int = 9) -> None:
        super().__init__()
        self.size = size
        self.dropout = nn.Dropout2d(dropout)
        self.inp = nn.Conv2d(size + 1, channels, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm2d(channels) for _ in range(layers))
        self.squeeze = nn.Conv2d(channels, 16, 1)
        self.head = nn.Linear(16 * size * size, size * size * size)
        self.local = nn.Conv2d(channels, size, 1)  # per-cell path, so copying a given is easy

    def forward(self, puzzles: Tensor) -> Tensor:
        s = self.size
        x = puzzle_one_hot(puzzles, s, self.inp.weight.dtype).transpose(1, 2).reshape(-1, s + 1, s, s)  # (B, 10, 9, 9)
        h = F.relu(self.inp(x))
        for conv, norm in zip(self.blocks, self.norms):
            h = h + F.relu(norm(conv(h)))                                     # (B, C, 9, 9)
        h = self.dropout(h)
        glob = self.head(F.relu(self.squeeze(h)).flatten(1)).view(-1, s * s, s)
        local = self.local(h).flatten(2).transpose(1, 2)                     # (B, 81, 9)
        return glob + local                                                  # logits (B, 81, 9)

    def fit(self, puzzles: Tensor, solutions: Tensor) -> Fit:
        """Cross-entropy of the solution's digits (mean over cells) and the logits the SL reads."""
        logits = self(puzzles)                                               # (B, 81, 9)
        return Fit(F.cross_entropy(logits.reshape(-1, self.size), (solutions - 1).reshape(-1)), logits)

    @torch.no_grad()
    def greedy(self, puzzles: Tensor) -> Tensor:
        """Per-cell argmax, the givens kept (as a solver keeps them): classes ``(B, 81)`` (digits - 1)."""
        return torch.where(puzzles > 0, puzzles, self(puzzles).argmax(-1) + 1) - 1

    def log_probs(self, puzzles: Tensor) -> Tensor:
        return self(puzzles).log_softmax(-1)                                 # (B, 81, 9) the factorized q(y_i | x)


class SudokuRNN(StructuredModel):
    autoregressive = True

    def __init__(self, hidden: int = 128, layers: int = 5, dropout: float = 0.2, cell: str = "rnn",
                 size: int = 9) -> None:
        super().__init__()
        self.size = size
        cells = size * size
        self.decoder = RecurrentDecoder(n_values=size, length=cells, hidden_size=hidden, num_layers=layers, cell=cell,
                                        nonlinearity="tanh", dropout=dropout, context_dim=cells * (size + 1),
                                        step_dim=size + 1)

    def conditioning(self, puzzles: Tensor) -> tuple[Tensor, Tensor]:
        oh = puzzle_one_hot(puzzles, self.size, self.decoder.head.weight.dtype)  # (B, 81, 10)
        return oh.flatten(1), oh                  # context (B, 810), step_inputs (B, 81, 10)

    def forward(self, puzzles: Tensor, solutions: Tensor) -> Tensor:
        """Teacher-forced logits ``(B, 81, 9)`` for the digits ``solutions`` (1..9)."""
        ctx, steps = self.conditioning(puzzles)
        return self.decoder.step_logits(solutions - 1, context=ctx, step_inputs=steps)

    @torch.no_grad()
    def generate(self, puzzles: Tensor, greedy: bool = True) -> Tensor:
        """Digits ``(B, 81)`` (1..9), greedy by default, in eval mode (``RecurrentDecoder.sample``).

        The givens are kept, as a solver keeps them: a given cell is not sampled, it is written,
        and the cells after it condition on it (``RecurrentDecoder.sample(fixed=...)``).
        """
        ctx, steps = self.conditioning(puzzles)
        return self.decoder.sample(context=ctx, step_inputs=steps, greedy=greedy, fixed=puzzles - 1) + 1

    def engine(self, puzzles: Tensor):
        ctx, steps = self.conditioning(puzzles)
        return self.decoder.engine(ctx, steps)

    def fit(self, puzzles: Tensor, solutions: Tensor) -> Fit:
        """Teacher-forced cross-entropy of the solution's digits (mean over cells); the PSL re-reads the puzzles."""
        logits = self(puzzles, solutions)                                    # teacher forcing, (B, 81, 9)
        return Fit(F.cross_entropy(logits.reshape(-1, self.size), (solutions - 1).reshape(-1)), None, puzzles)

    def greedy(self, puzzles: Tensor) -> Tensor:
        return self.generate(puzzles, greedy=True) - 1                      # (B, 81) classes, the givens kept

    def prefix_nll(self, puzzles: Tensor, solutions: Tensor, prefix: Tensor) -> Tensor:
        """``-log p(solution_t | prefix_<t, puzzle)`` per cell ``(B, 81)``: the solution's digits scored after the
        classes ``prefix`` (e.g. the model's own sample), teacher-forced on the prefix (train mode as ``fit``)."""
        logits = self(puzzles, prefix + 1)                                   # (B, 81, 9), inputs: the prefix
        return F.cross_entropy(logits.transpose(1, 2), solutions - 1, reduction="none")

    def psl_inputs(self, fit: Fit, m: int):
        # the engine of the local conditionals p(y_i | y_-i, x), (m, 81, 9), and its sample y ~ p(. | x), givens kept,
        # drawn as the conditionals are computed: in eval mode (dropout off), whatever the module's mode
        p = fit.conditioning[:m]
        engine = self.engine(p)
        return engine.sample(fixed=p - 1), engine


def build_model(name: str, cfg) -> nn.Module:
    """``convnet`` / ``convnet_sl`` -> :class:`ConvNet`; ``rnn`` / ``rnn_psl`` / ``rnn_own`` -> :class:`SudokuRNN`."""
    if name in ("convnet", "convnet_sl"):
        return ConvNet(cfg.conv_channels, cfg.conv_layers, cfg.conv_dropout, cfg.size)
    if name in ("rnn", "rnn_psl", "rnn_own"):
        return SudokuRNN(cfg.rnn_hidden, cfg.rnn_layers, cfg.rnn_dropout, size=cfg.size)
    raise ValueError(f"unknown model {name!r}; choose from convnet, convnet_sl, rnn, rnn_psl, rnn_own")
