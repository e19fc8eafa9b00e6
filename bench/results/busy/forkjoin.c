/* A 2-thread region of 8 pieces, OpenMP (argv[3] = 0) or the experimental pool (1): best/median/p90.
 * gcc -O2 -fopenmp -I. forkjoin.c -o forkjoin && OMP_WAIT_POLICY=passive ./forkjoin CALLS WORK 0|1 */
#include "opc_pool_experiment.h"  /* this folder: not part of the runtime */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
volatile double sink; static long W;
static void piece(void *ctx, int64_t p){ (void)ctx;(void)p; double s=0; for(long i=0;i<W/8;i++) s+=i*1e-9; sink=s; }
int main(int argc,char**argv){ int calls=atoi(argv[1]); W=atol(argv[2]); int pool=atoi(argv[3]); double *t=malloc(8*calls);
 for(int c=0;c<calls;c++){ double t0=now();
  if (pool) opc_pool_run(8, piece, NULL, 2); else {
  #pragma omp parallel for schedule(dynamic,1) num_threads(2)
  for(int p=0;p<8;p++) piece(NULL,p); }
  t[c]=now()-t0; double t1=now(); while(now()-t1<2e-4); }
 qsort(t,calls,8,cmp); printf("%s work %ld: best %.3f med %.3f p90 %.3f ms\n",pool?"pool":"omp ",W,t[0]*1e3,t[calls/2]*1e3,t[calls*9/10]*1e3);}
