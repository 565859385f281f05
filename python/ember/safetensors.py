"""safetensors files (safetensors.torch's save_file / load_file names) through ember's C++
reader and writer: the writer is atomic, the reader checks every header field."""
from . import _ember


def save_file(tensors, filename, metadata=None):
    """Writes {name: tensor} (CPU tensors, any dtype and strides) and {str: str} metadata."""
    _ember._save_safetensors(str(filename), [(k, v.detach()) for k, v in tensors.items()],
                             dict(metadata or {}))


def load_file(filename, device="cpu"):
    """{name: tensor} in the file's order, on `device`."""
    pairs, _ = _ember._load_safetensors(str(filename))
    return {k: (v if device == "cpu" else v.to(device)) for k, v in pairs}


def load_metadata(filename):
    return dict(_ember._load_safetensors(str(filename))[1])
