package taskstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// NewID returns a new task ID: 128 bits from crypto/rand as 32 lowercase hex
// characters (T-17..T-20). It is safe for concurrent use.
func NewID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("taskstore: new id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
