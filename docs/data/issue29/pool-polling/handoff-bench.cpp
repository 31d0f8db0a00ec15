// The cost of a ThreadPool job to its caller: 20000 empty two-chunk jobs back to back, then
// with ~14 us of serial work between them (the worker has gone idle), then the serial work alone.
// Build: g++ -O2 -std=c++20 -Iinclude handoff-bench.cpp build/src/libturbokv_core.a -lpthread
#include "turbokv/thread_pool.hpp"
#include <chrono>
#include <cstdio>
#include <atomic>
int main(){
  turbokv::ThreadPool pool(2);
  std::atomic<long> x{0};
  for (int rep=0; rep<3; ++rep){
  auto t0=std::chrono::steady_clock::now();
  const int N=20000;
  for(int i=0;i<N;++i) pool.parallel_for(2,[&](size_t b,size_t e){ x+= e-b; });
  auto t1=std::chrono::steady_clock::now();
  printf("%.2f us per job\n", std::chrono::duration<double,std::micro>(t1-t0).count()/N);
  // with ~10us work between jobs on main thread
  t0=std::chrono::steady_clock::now();
  for(int i=0;i<N/4;++i){ volatile double s=0; for(int k=0;k<4000;++k) s = s + k; pool.parallel_for(2,[&](size_t b,size_t e){ x+= e-b; }); }
  t1=std::chrono::steady_clock::now();
  printf("%.2f us per job+serial\n", std::chrono::duration<double,std::micro>(t1-t0).count()/(N/4));
  t0=std::chrono::steady_clock::now();
  for(int i=0;i<N/4;++i){ volatile double s=0; for(int k=0;k<4000;++k) s = s + k; }
  t1=std::chrono::steady_clock::now();
  printf("%.2f us serial only\n", std::chrono::duration<double,std::micro>(t1-t0).count()/(N/4));
  }
}
