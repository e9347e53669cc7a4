"""M-RoPE positions of a prompt (Qwen2-VL family): three rows (time, height, width) per token.

Text tokens count up by one in all three rows. An image's placeholder tokens (one per merge block of its
``(t, h, w)`` patch grid, in row-major block order) all start from the position the next text token would
have had: time ``start + frame``, height ``start + block row``, width ``start + block column``; the text
after the image resumes at ``start + max(blocks high, blocks wide)``. A prompt thus ends at a position below
its length; ``delta`` (last position + 1 - length) is added to every generated token's plain position.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Grid = tuple[int, int, int]


def image_positions(start: int, grid: Grid, merge: int) -> torch.Tensor:
    """[3, tokens] positions of one image's placeholders starting at ``start``."""
    t, h, w = (int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge)
    frames = torch.arange(t).view(t, 1, 1).expand(t, h, w)
    rows = torch.arange(h).view(1, h, 1).expand(t, h, w)
    cols = torch.arange(w).view(1, 1, w).expand(t, h, w)
    return torch.stack((frames, rows, cols)).reshape(3, -1) + start


def mrope_positions(num_tokens: int, images: Sequence[tuple[int, Grid]], merge: int) -> tuple[torch.Tensor, int]:
    """Positions [3, num_tokens] (int64) of a prompt whose images' placeholders start at the given offsets
    (``(offset, grid)`` pairs in prompt order), and the prompt's delta."""
    pieces: list[torch.Tensor] = []
    cursor = 0  # next prompt index
    position = 0  # next text position
    for offset, grid in sorted(images, key=lambda item: item[0]):
        if offset < cursor:
            raise ValueError(f"image placeholders overlap at prompt index {offset}")
        text = offset - cursor
        pieces.append(torch.arange(position, position + text).expand(3, text))
        position += text
        block = image_positions(position, grid, merge)
        pieces.append(block)
        cursor = offset + block.shape[1]
        position += max(int(grid[1]), int(grid[2])) // merge
    if cursor > num_tokens:
        raise ValueError(f"image placeholders run past the prompt's {num_tokens} tokens")
    tail = num_tokens - cursor
    pieces.append(torch.arange(position, position + tail).expand(3, tail))
    positions = torch.cat(pieces, dim=1).to(torch.int64)
    last = int(positions.max()) if num_tokens else -1
    return positions, last + 1 - num_tokens


def image_spans(token_ids: Sequence[int], image_token_id: int, grids: Sequence[Grid],
                merge: int) -> list[tuple[int, Grid]]:
    """``(offset, grid)`` of each image from the prompt's runs of ``image_token_id`` (one run per image,
    each of the grid's token count)."""
    spans: list[tuple[int, Grid]] = []
    i, n = 0, len(token_ids)
    for grid in grids:
        while i < n and token_ids[i] != image_token_id:
            i += 1
        length = int(grid[0]) * int(grid[1]) * int(grid[2]) // (merge * merge)
        if i + length > n or any(token_ids[j] != image_token_id for j in range(i, i + length)):
            raise ValueError(f"image {len(spans)} expects {length} placeholder tokens at prompt index {i}")
        spans.append((i, grid))
        i += length
    return spans
