//go:build !amd64 || purego

package lsm

// shuffleAsm is false where shuffle_amd64.s is not built: shuffle and
// unshuffleWords transpose in Go.
const shuffleAsm = false

func shuffle16(dst, src *byte, w, n, n16 int)   { panic("lsm: shuffle16 without assembly") }
func unshuffle16(dst, src *byte, w, n, n16 int) { panic("lsm: unshuffle16 without assembly") }
