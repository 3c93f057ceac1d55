"""Where a job runs: device resolution and compiler preflight, the GPU pool, data-parallel ranks."""
