// CUDA Q8_0 kernels: activation quantization, narrow MMVQ (1..8 columns, bitwise equal per column
// to the 1-column call) and a tensor-core MMQ for wide batches. Design notes: docs/gpu-kernels.md.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace dq { namespace cuda {

// Weights W [rows, cols] as Q8_0 in structure-of-arrays form on the device:
// qs int8 [rows, cols] row-major (each row 16-byte aligned; cols % 32 == 0),
// d  fp16 bits [rows, cols/32] (the CPU BlockQ8_0::d of block (r, b)).
struct Q8Weights { const int8_t* qs; const uint16_t* d; int rows; int cols; };
// Activations X [ncols, cols]: qs int8 [ncols, cols], d float [ncols, cols/32]
// (each d is the fp16-rounded block scale, stored as float).
struct Q8Acts { const int8_t* qs; const float* d; int ncols; int cols; };

// Host helper: CPU BlockQ8_0 blocks [rows, cols/32] -> SoA buffers (host side, for upload).
void split_q8_blocks(const void* blocks, int rows, int cols, int8_t* qs_out, uint16_t* d_out);

// x [ncols, cols] f32 -> Q8Acts layout; the same math as quantize_row_q8_0_ref (d = amax/127
// rounded to fp16, q = round-half-away(x / d)); bitwise equal to the CPU bytes.
void quantize_q8(const float* x, int ncols, int cols, int8_t* qs, float* d, cudaStream_t s);

// Narrow MMVQ, ncols 1..8: y [ncols, rows] (row stride = rows) = X W^T. Each weight block is read
// once and applied to all columns; every column is reduced in exactly the ncols = 1 order, so
// column j of any call is bitwise equal to a 1-column call on column j. Throws
// std::invalid_argument on bad shapes.
//
// The GPU canonical order (not the CPU one of kernels.h; CPU and GPU need not be bitwise equal):
// each output row is split over 32 P lanes (P warps, mmvq_warps_per_row(cols): 4 from 4096
// columns up, 2 from 2048, else 1); lane t owns block t of every (32 P)-block chunk of the row,
// i.e. block 32 P i + t in chunk i.
// Per lane, blocks in K order:
//   isum = exact int32 sum of its 32 products (8 chained dp4a)
//   s    = fp16(w.d) * x.d                      (one fp32 multiply, round to nearest)
//   acc  = fmaf(s, (float)isum, acc)            (one fused multiply-add)
// then in each warp the xor butterfly (offsets 16, 8, 4, 2, 1; each step acc + shfl(acc)), and
// the pairwise tree over the P warps: y = (warp0 + warp1) + (warp2 + warp3) at P = 4.
void mmvq(const Q8Weights& w, const Q8Acts& x, float* y, cudaStream_t s);

// MMQ: tiled mat-mat (int8 tensor cores, mma.sync m16n8k32, one Q8_0 block per k-step), any
// ncols >= 1, its own reduction order (not bitwise equal to mmvq): per (row, column, block) one
// exact int32 block dot, then acc = fmaf(w.d * x.d, (float)idot, acc) over the blocks
// b = w (mod 4) in K order in each of 4 warps, then acc0 + acc1 + acc2 + acc3 left to right.
// Relative error vs a float64 reference of the same quantized operands is at fp32 rounding level
// (bench/gpu/kernels_bench.cu checks ||y - ref|| / ||ref|| < 1e-5).
void mmq(const Q8Weights& w, const Q8Acts& x, float* y, cudaStream_t s);

// Grouped narrow MMVQ (the MoE's device-side dispatch): one launch runs every slot of a table
// in device memory, slots [0] = n, then mat[S], base[S], count[S] (S = max_slots): slot s < run_slots
// (the launch covers those; run_slots >= the largest n the table can hold at this step) applies
// matrix mat[s] of g to columns base[s] .. base[s] + count[s] - 1, column j's activations being
// row x_row[j] of X (x_row null: row j), its output row j of y [*, rows]. Counts are 1..max_count
// (max_count <= 4). Each column is reduced in the canonical order of g.cols, so it is bitwise
// equal to a 1-column mmvq() call of its matrix on it. Nothing is read back to the host.
// lead > 0 promises that slot 0 is matrix 0 over columns 0 .. lead - 1 whatever the table says
// (the forward's shared expert): in the one-column form (max_count 1) its blocks then read their
// first weights before waiting for the previous kernel.
struct Q8Group {
    const int8_t* const* qs;   // device [mats]: each matrix's qs (layout of Q8Weights)
    const uint16_t* const* d;  // device [mats]: its scales
    int rows, cols;            // the shape of every matrix
};
void mmvq_grouped(const Q8Group& g, const int32_t* slots, int max_slots, int run_slots, int max_count,
                  const int32_t* x_row, const int8_t* xq, const float* xd, float* y, cudaStream_t s,
                  int lead = 0);

// Kernel launches made by this library and by the forward's ops on the calling thread so far
// (benches report launches per step); check_launch(what) adds one after every launch and throws
// std::runtime_error naming `what` when it failed.
long long launch_count();
void check_launch(const char* what);

// --- Tuning surface (benches and tests). Every configuration computes the same bits: the
// rows per row group, the chunks in flight, the block size and the load scheme change
// scheduling, never the order. Built: mode 0 (R, U) = (1,2), (1,4), (2,1), (2,2), (4,1), (4,2) at
// P = 1, 2, 4; mode 3 (R, U, G, warps per block) = (2,2,1,4), (4,2,1,4), (4,3,1,4), (8,2,1,4) and
// (4,2,1,8) (8 warps: two copies of the row group, each taking half of an even ncols) at P = 4,
// persistent or not; others throw.
struct MmvqConfig {
    int rows_per_warp;    // R: rows each row group computes together (sharing each activation load)
    int unroll;           // U: chunks per row in flight per row group (mode 3: ring stages)
    int warps_per_block;  // a multiple of the warps per row, at most 8
    int warps_per_row;    // P: 0 = mmvq_warps_per_row(cols); 1, 2, 4 are built (mode 3: 4)
    int mode;             // 0: load U chunks into registers, then use them;
                          // 3: bulk-copy (TMA) ring of U stages in shared memory
    int stage_chunks = 1; // mode 3: chunks of each row per stage (G)
    int persistent = 1;   // mode 3: as many CTAs as fit, each taking many row groups (0: one each)
};
// Warps per output row in the canonical order, a function of cols only.
int mmvq_warps_per_row(int cols);
// The fastest measured configuration for ncols (1..8) on 16384 x 16384 and larger (mode 3).
MmvqConfig mmvq_default_config(int ncols);
// The configuration mmvq() uses: the above where it was measured to win (4 warps per row,
// cols % 256 == 0, and 2048 row groups of 2 rows or 4+ columns; R2U2 in place of R4U3 below
// 2^28 weights); otherwise the register-streaming table (mode 0).
// mmvq() also takes mode 0 when the scales are not 16-byte aligned.
MmvqConfig mmvq_default_config(int ncols, int rows, int cols);
void mmvq_with_config(const Q8Weights& w, const Q8Acts& x, float* y, const MmvqConfig& cfg,
                      cudaStream_t s);

}}  // namespace dq::cuda
