/* Open MPI baseline for `commhal bench allreduce`: the same sizes, f32 sum, the
 * median time over iterations, where each iteration's time is the slowest rank's.
 * Prints a table in the same columns as commhal bench (out-of-place only).
 *
 *   mpicc -O2 -o allreduce allreduce.c
 *   mpirun --oversubscribe -np 8 ./allreduce 1024 67108864 4 20 5
 *           (min bytes, max bytes, factor, iterations, warm-up)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long minb = argc > 1 ? atol(argv[1]) : 1024;
  long maxb = argc > 2 ? atol(argv[2]) : 64L << 20;
  long factor = argc > 3 ? atol(argv[3]) : 4;
  int iters = argc > 4 ? atoi(argv[4]) : 20;
  int warm = argc > 5 ? atoi(argv[5]) : 5;
  if (factor < 2) factor = 2;
  size_t maxcount = (size_t)maxb / sizeof(float);
  float *in = malloc(maxcount * sizeof(float)), *out = malloc(maxcount * sizeof(float));
  double *times = malloc(sizeof(double) * iters);
  if (!in || !out || !times) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  if (rank == 0)
    printf("# Open MPI %d ranks, f32 sum, median of %d iterations (max over ranks)\n"
           "#%11s %12s %6s %6s %10s %10s %10s %8s\n",
           n, iters, "size", "count", "type", "redop", "time(us)", "algbw", "busbw", "#wrong");
  for (long bytes = minb; bytes <= maxb; bytes *= factor) {
    size_t count = (size_t)bytes / sizeof(float);
    /* Small integers: the sum is exact in any order. */
    for (size_t i = 0; i < count; i++) in[i] = (float)((rank + 1 + i) % 7);
    for (int it = -warm; it < iters; it++) {
      memset(out, 0xff, count * sizeof(float));
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, worst;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= 0) times[it] = worst;
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += (float)((r + 1 + i) % 7);
      if (out[i] != want) wrong++;
    }
    long total;
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    qsort(times, iters, sizeof(double), cmp);
    double t = times[iters / 2];
    double algbw = bytes / t / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
    if (rank == 0)
      printf("%12ld %12zu %6s %6s %10.1f %10.3f %10.3f %8ld\n", bytes, count, "float", "sum",
             t * 1e6, algbw, busbw, total);
  }
  free(in); free(out); free(times);
  MPI_Finalize();
  return 0;
}
