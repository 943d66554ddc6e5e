"""Labels the reports share (text, HTML, the rich views): one home for each."""

from __future__ import annotations


def device_label(device: str) -> str:
    """``"0"`` -> ``"GPU 0"``, ``"cpu"`` -> ``"CPU RAM"``, ``"disk"`` stays."""
    return f"GPU {device}" if str(device).isdigit() else {"cpu": "CPU RAM"}.get(str(device), str(device))


__all__ = ["device_label"]
