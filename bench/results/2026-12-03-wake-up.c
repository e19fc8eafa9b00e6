/* Wake-up cost of OpenMP regions per wait policy (bench/results/2026-12-03-wake-up.txt):
 *   gcc -O2 -fopenmp 2026-12-03-wake-up.c -o wake && OMP_WAIT_POLICY=passive ./wake 12 30 400 [gap_us] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
/* one "model call": R parallel regions back to back, each ~W us of work per thread */
static float buf[2][1<<16];
static void region(int w){
  #pragma omp parallel num_threads(2)
  { int t=omp_get_thread_num(); float s=buf[t][0]; for(int i=0;i<w*300;i++) s=s*0.999f+1.0f; buf[t][1]=s; }
}
int main(int argc,char**argv){ int R=atoi(argv[1]), w=atoi(argv[2]), calls=atoi(argv[3]);
  double *ts=malloc(sizeof(double)*calls);
  for(int c=0;c<calls;c++){ double t=now(); for(int r=0;r<R;r++) region(w); ts[c]=now()-t;
    double g=now(); while(now()-g<(argc > 4 ? atof(argv[4]) : 20.0)*1e-6); /* 20 us of Python between calls */ }
  /* median and best */
  for(int i=0;i<calls;i++)for(int j=i+1;j<calls;j++)if(ts[j]<ts[i]){double x=ts[i];ts[i]=ts[j];ts[j]=x;}
  double one=0; { double t=now(); for(int i=0;i<w*300*100;i++) buf[0][2]=buf[0][2]*0.999f+1.0f; one=(now()-t)/100; }
  printf("best %.1f us  median %.1f us  (%d regions of %.1f us work)\n", ts[0]*1e6, ts[calls/2]*1e6, R, one*1e6);
}
