import pytest

from vramlens.allocator import AllocatorConfig, parse_alloc_conf
from vramlens.errors import InputError

MiB = 1024 * 1024


def test_full_string():
    c = parse_alloc_conf("expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,"
                         "garbage_collection_threshold:0.8")
    assert c.expandable_segments and c.max_split_size == 128 * MiB
    assert c.roundup_power2_divisions == (4,) * 16 and c.garbage_collection_threshold == 0.8
    assert parse_alloc_conf(None) == AllocatorConfig() == parse_alloc_conf("  ")
    assert parse_alloc_conf(" expandable_segments : True ").expandable_segments  # spaces dropped
    assert parse_alloc_conf("pinned_use_cuda_host_register:True").ignored == ("pinned_use_cuda_host_register",)


def test_division_lists_differ_by_version():
    # PyTorch <= 2.8: ">" overwrites the last listed interval (512 MiB) too; 2.9 starts after it
    assert parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]").roundup_power2_divisions == (
        (1,) * 9 + (4,) * 7)
    assert parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]", version="2.9").roundup_power2_divisions == (
        (1,) * 9 + (2,) + (4,) * 6)


@pytest.mark.parametrize(
    "text, version, message",
    [
        ("max_split_size_mb:20", "2.5",
         "PYTORCH_CUDA_ALLOC_CONF max_split_size_mb=20: CachingAllocator option max_split_size_mb too small, must be > 20"),
        ("max_split_size_mb:19", "2.9",
         "PYTORCH_CUDA_ALLOC_CONF max_split_size_mb=19: CachingAllocator option max_split_size_mb too small, must be >= 20"),
        ("max_non_split_rounding_mb:8", None,
         "PYTORCH_CUDA_ALLOC_CONF max_non_split_rounding_mb=8: CachingAllocator option max_non_split_rounding_mb too small, must be > 20"),
        ("max_split_size_mb:lots", None, "PYTORCH_CUDA_ALLOC_CONF max_split_size_mb=lots: 'lots' is not a whole number"),
        ("garbage_collection_threshold:1.5", None,
         "PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold=1.5: garbage_collect_threshold too big, set it 0.0~1.0"),
        ("garbage_collection_threshold:0", None,
         "PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold=0: garbage_collect_threshold too small, set it 0.0~1.0"),
        ("garbage_collection_threshold:1", "2.10",
         "PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold=1: garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
        ("roundup_power2_divisions:3", None,
         "PYTORCH_CUDA_ALLOC_CONF roundup_power2_divisions=3: For roundups, the divisions has to be power of 2"),
        ("roundup_power2_divisions:[300:2]", None,
         "PYTORCH_CUDA_ALLOC_CONF roundup_power2_divisions=300: For roundups, the intervals have to be power of 2"),
        ("expandable_segments:yes", None,
         "PYTORCH_CUDA_ALLOC_CONF expandable_segments=yes: Expected a single True/False argument for expandable_segments"),
        ("backend:magic", None,
         "PYTORCH_CUDA_ALLOC_CONF backend=magic: Unknown allocator backend, options are native and cudaMallocAsync"),
        ("max_split_mb:128", None, "PYTORCH_CUDA_ALLOC_CONF: Unrecognized CachingAllocator option: max_split_mb"),
        ("max_split_mb:128", "2.9", "PYTORCH_CUDA_ALLOC_CONF: Unrecognized key 'max_split_mb' in CUDA allocator config."),
        ("expandable_segments:True;max_split_size_mb:128", None,
         "PYTORCH_CUDA_ALLOC_CONF expandable_segments=True;max_split_size_mb: Expected a single True/False argument for expandable_segments"),
        ("max_split_size_mb", None,
         "PYTORCH_CUDA_ALLOC_CONF max_split_size_mb: Error parsing CachingAllocator settings, expected : (got 'end of text')"),
    ],
)
def test_rejected_like_pytorch(text, version, message):
    with pytest.raises(InputError) as e:
        parse_alloc_conf(text, version=version)
    assert str(e.value) == message


def test_versions_outside_the_model():
    with pytest.raises(InputError) as e:
        parse_alloc_conf("expandable_segments:True", version="1.13")
    assert str(e.value) == "torch version '1.13' is not modelled: the simulator covers PyTorch 2.4 and later"
