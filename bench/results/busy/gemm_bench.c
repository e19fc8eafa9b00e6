/* The f32 GEMM alone (runtime/opc_gemm.h) at nt threads: best/median/p90 of CALLS calls and a checksum.
 * gcc -O3 -std=gnu11 -fopenmp -fno-math-errno -fno-trapping-math -march=native -mprefer-vector-width=512 \
 *     -I../../../runtime gemm_bench.c -o gemm_bench -lm && OMP_WAIT_POLICY=passive ./gemm_bench M N K NT CALLS */
#include "opc_runtime.h"
#include "opc_gemm.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc, char **argv) {
    int M=atoi(argv[1]), N=atoi(argv[2]), K=atoi(argv[3]), nt=atoi(argv[4]), calls=atoi(argv[5]);
    opc_rt_threads = nt;
    float *A=malloc(4L*M*K),*B=malloc(4L*K*N),*C=malloc(4L*M*N),*bias=malloc(4L*N);
    for(long i=0;i<(long)M*K;i++)A[i]=(float)((i*7)%13)/13.f;
    for(long i=0;i<(long)K*N;i++)B[i]=(float)((i*5)%11)/11.f;
    for(long i=0;i<N;i++)bias[i]=0.5f;
    double *t=malloc(sizeof(double)*calls);
    for(int w=0;w<5;w++) opc_gemm_f32(1,M,N,K,A,0,0,B,0,0,bias,0,C,NULL);
    for(int c=0;c<calls;c++){double t0=now(); opc_gemm_f32(1,M,N,K,A,0,0,B,0,0,bias,0,C,NULL); t[c]=now()-t0;}
    qsort(t,calls,sizeof(double),cmp);
    double cs=0; for(long i=0;i<(long)M*N;i++) cs+=C[i];
    printf("%dx%dx%d nt=%d best %.3f med %.3f p90 %.3f ms  sum %.6g\n",M,N,K,nt,t[0]*1e3,t[calls/2]*1e3,t[calls*9/10]*1e3,cs);
    return 0;
}
