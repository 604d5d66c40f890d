package main

import (
	"fmt"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestBasicAuthVerify: the right password passes and a wrong one does not,
// from the cache too, which stays within its bound.
func TestBasicAuthVerify(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := newBasicAuth("")
	for range 2 {
		if !a.verify("collector", string(hash), "s3cret") {
			t.Fatal("the right password refused")
		}
		if a.verify("collector", string(hash), "wrong") {
			t.Fatal("a wrong password accepted")
		}
	}
	// The second round came from the cache: one entry a check.
	if len(a.cache) != 2 {
		t.Fatalf("%d checks cached, want 2", len(a.cache))
	}
	for i := range 3 * basicAuthCacheSize {
		if a.verify("collector", string(hash), fmt.Sprint("guess", i)) {
			t.Fatalf("guess %d accepted", i)
		}
	}
	if n := len(a.cache); n > basicAuthCacheSize {
		t.Fatalf("%d checks cached, want at most %d", n, basicAuthCacheSize)
	}
	if !a.verify("collector", string(hash), "s3cret") {
		t.Fatal("the right password refused after the cache filled")
	}
}
