package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// StepPrefixBytes bounds what is read of a rank file for its step alone:
// the encoder writes version, dp_rank, dp_size and step first, in some 60
// bytes, so a rank resuming takes the step of a peer's file, which it does
// not otherwise need, from that file's start.
const StepPrefixBytes = 4 << 10

// stepOf reads the top-level "step" of a state file from b, its first
// bytes, with a streaming decoder that stops there: the keys before it are
// skipped value by value. The step must be a whole number within b,
// followed by a comma or the object's end; what comes after is not read.
func stepOf(b []byte) (uint64, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, errors.New("not a dataloaderd state file: not a JSON object")
	}
	for {
		t, err := dec.Token()
		if err != nil {
			return 0, prefixProblem(err)
		}
		key, ok := t.(string)
		if !ok { // the object's end
			return 0, errors.New(`not a dataloaderd state file: it has no "step"`)
		}
		if key != "step" {
			if err := skipValue(dec); err != nil {
				return 0, prefixProblem(err)
			}
			continue
		}
		var step uint64
		if err := dec.Decode(&step); err != nil {
			return 0, prefixProblem(err)
		}
		// A number cut by the end of b would read as a smaller one: a comma
		// or the object's end must follow it within b.
		rest := bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")
		if len(rest) == 0 {
			return 0, prefixProblem(io.ErrUnexpectedEOF)
		}
		if rest[0] != ',' && rest[0] != '}' {
			return 0, fmt.Errorf("not a dataloaderd state file: %q after its step", rest[0])
		}
		return step, nil
	}
}

// skipValue reads past the next value of dec, token by token.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// prefixProblem says why stepOf found no step: the bytes read ended first,
// or they are not JSON.
func prefixProblem(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf(`no top-level "step" within its first %d bytes, where dataloaderd writes it`, StepPrefixBytes)
	}
	return fmt.Errorf("not a dataloaderd state file: %v", err)
}

// stepRefused is the error of the state file name whose step its start
// does not give (err): whole, the file read whole (nil when it is not
// read whole), is decoded, and its error given if it is not a state file,
// else err.
func stepRefused(name string, whole []byte, err error) error {
	if whole != nil {
		if _, _, derr := decode(whole); derr != nil {
			err = derr
		}
	}
	return fmt.Errorf("%w: %s: %v", ErrMismatch, name, err)
}
