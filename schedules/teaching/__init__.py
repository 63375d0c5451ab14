"""The mini-lab's teaching pieces: the lecture's CPU matmul schedule and its tile sweep."""

from tvm_ext.schedules.teaching.lecture import LectureConfig, lecture_cpu_matmul
from tvm_ext.schedules.teaching.sweep import tile_sweep

__all__ = ["LectureConfig", "lecture_cpu_matmul", "tile_sweep"]
