package source

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// readStreamFormat walks the stream's messages in place.
func (f *arrowFile) readStreamFormat() error {
	r, err := ipc.NewReaderFromMessageReader(&mappedMessages{f: f}, ipc.WithEnsureNativeEndian(false))
	if err != nil {
		return f.error("not a readable Arrow IPC file or stream: %v", err)
	}
	defer r.Release()
	if err := f.useSchema(r.Schema()); err != nil {
		return err
	}
	for r.Next() {
		if err := f.addBatch(r.RecordBatch()); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return f.error("record batch %d: %v", len(f.batches), err)
	}
	return nil
}

// mappedMessages yields an Arrow IPC stream's messages as slices of the
// mapping, so reading a stream copies no token data.
type mappedMessages struct {
	f   *arrowFile
	pos int
}

// Message returns the next message, or io.EOF at the end-of-stream marker or
// the end of the file.
func (m *mappedMessages) Message() (*ipc.Message, error) {
	data := m.f.mapping
	if m.pos+4 > len(data) {
		return nil, io.EOF
	}
	length := int64(int32(binary.LittleEndian.Uint32(data[m.pos:])))
	m.pos += 4
	if uint32(length) == 0xFFFFFFFF { // continuation marker, then the length
		if m.pos+4 > len(data) {
			return nil, fmt.Errorf("message at byte %d: truncated length", m.pos-4)
		}
		length = int64(int32(binary.LittleEndian.Uint32(data[m.pos:])))
		m.pos += 4
	}
	if length == 0 {
		return nil, io.EOF
	}
	if length < 0 || length > int64(len(data)-m.pos) {
		return nil, fmt.Errorf("message at byte %d: metadata length %d, %d bytes left", m.pos, length, len(data)-m.pos)
	}
	if err := checkArrowMessage(data[m.pos : m.pos+int(length)]); err != nil {
		return nil, fmt.Errorf("message at byte %d: %w", m.pos, err)
	}
	meta := memory.NewBufferBytes(data[m.pos : m.pos+int(length)])
	m.pos += int(length)
	probe := ipc.NewMessage(meta, memory.NewBufferBytes(nil))
	bodyLen := probe.BodyLen()
	probe.Release()
	if bodyLen < 0 || bodyLen > int64(len(data)-m.pos) {
		return nil, fmt.Errorf("message at byte %d: body length %d, %d bytes left", m.pos, bodyLen, len(data)-m.pos)
	}
	body := memory.NewBufferBytes(data[m.pos : m.pos+int(bodyLen)])
	m.pos += int(bodyLen)
	return ipc.NewMessage(meta, body), nil
}

func (m *mappedMessages) Retain()  {}
func (m *mappedMessages) Release() {}
