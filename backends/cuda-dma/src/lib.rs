//! cuda-dma (in progress)
