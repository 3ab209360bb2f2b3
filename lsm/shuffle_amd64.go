//go:build amd64 && !purego

package lsm

// shuffleAsm says shuffle16 and unshuffle16 are the SSE2 versions in
// shuffle_amd64.s.
const shuffleAsm = true

// shuffle16 writes records [0, n16) of src (n records of w bytes, w a
// multiple of 8, n16 a multiple of 16 and at most n) into the planes of
// dst as shuffle does (byte k of record i to dst[k*n+i]).
//
//go:noescape
func shuffle16(dst, src *byte, w, n, n16 int)

// unshuffle16 inverts shuffle16: records [0, n16) of dst from the planes
// of src.
//
//go:noescape
func unshuffle16(dst, src *byte, w, n, n16 int)
