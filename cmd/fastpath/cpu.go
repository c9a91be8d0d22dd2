package main

import "runtime"

// lastCPU keeps the generator off CPU 0, where most interrupts and the
// control process tend to land.
func lastCPU() int { return runtime.NumCPU() - 1 }
