package stream

import "math"

// piece is a run of a line: its tokens [at, at+n) are tokens [off, off+n)
// of frame f. Pieces of one line are in order and cover what was filled.
// A blocked piece is a blocklisted document's, written as padding.
type piece struct {
	at, n   uint64
	off     uint64
	f       frame
	blocked bool
}

// segment is a run of a line from start to the next segment's start: one
// document's tokens, or the padding (pad).
type segment struct {
	start int
	pos0  uint64 // position of its first token
	pad   bool
}

// metaWriter writes the metadata of one batch into a slot.
type metaWriter struct {
	lay        Layout
	line, seq  int
	eos        int32
	cont, mask bool

	pos, doc, ds, cu, lineSeg []int32
	loss                      []uint8

	segs      []segment
	segments  int
	maxSeqlen int
	scratch   []int32
	// iota is 0, 1, ... (a line's positions from 0); ones is a line of 1s.
	iota []int32
	ones []uint8
}

// newMetaWriter returns nil for a config without metadata; lay is the
// config's slot layout, laid out once by its check.
func newMetaWriter(c Config, lay Layout) *metaWriter {
	if len(c.Metadata) == 0 {
		return nil
	}
	m := &metaWriter{lay: lay, line: c.LineTokens(), seq: int(c.SeqLen), eos: int32(c.EOS),
		cont: c.Positions == PositionsContinue, mask: c.MaskDocumentBoundaries,
		iota: make([]int32, c.LineTokens()), ones: make([]uint8, c.SeqLen)}
	for k := range m.iota {
		m.iota[k] = int32(k)
	}
	for k := range m.ones {
		m.ones[k] = 1
	}
	return m
}

// tokens is the tokens field of a slot.
func (m *metaWriter) tokens(slot []byte) []int32 {
	f := m.lay.Fields[0]
	return int32s(slot[:f.Shape[0]*f.Shape[1]*4])
}

// start points the writer at a slot laid out by its layout.
func (m *metaWriter) start(slot []byte) {
	lay := m.lay
	view := func(name string) []int32 {
		f, ok := lay.field(name)
		if !ok {
			return nil
		}
		n := 1
		for _, d := range f.Shape {
			n *= d
		}
		return int32s(slot[f.Offset:])[:n]
	}
	m.pos, m.doc, m.ds = view(MetaPositionIDs), view(MetaDocumentIDs), view(MetaDatasetIDs)
	m.cu, m.lineSeg = view(MetaCuSeqlens), view(lineSegmentsField)
	m.loss = nil
	if f, ok := lay.field(MetaLossMask); ok {
		m.loss = slot[f.Offset : f.Offset+f.Shape[0]*f.Shape[1]]
	}
	m.segments, m.maxSeqlen = 0, 0
	if m.cu != nil {
		m.cu[0] = 0
	}
}

// finish writes what follows the batch's last line (lines of them).
func (m *metaWriter) finish(lines int) {
	if m.lineSeg != nil {
		m.lineSeg[lines] = int32(m.segments)
	}
}

// addLine writes the metadata of line b: its tokens, of which the first
// filled came from the pieces (the rest is padding), cut from shard s of
// dataset ds.
func (m *metaWriter) addLine(b int, tokens []int32, filled int, pieces []piece, s *shard, ds int) error {
	if err := m.segment(tokens, filled, pieces, s); err != nil {
		return err
	}
	if m.ds != nil {
		m.ds[b] = int32(ds)
	}
	if m.pos != nil || m.doc != nil {
		m.ids(b)
	}
	if m.loss != nil {
		m.lossMask(b, filled)
	}
	if m.cu != nil {
		m.cuts(b)
	}
	return nil
}

// segment cuts the line into m.segs. A frame of a source whose units are
// documents is one document, separators inside it or not; a unit of a
// delimited source (flat token files, text) holds whole documents, each
// ending after an EOS.
func (m *metaWriter) segment(tokens []int32, filled int, pieces []piece, s *shard) error {
	m.segs = m.segs[:0]
	delimited := s.ds.src.Delimited()
	for i, p := range pieces {
		if p.blocked {
			m.segs = append(m.segs, segment{start: int(p.at), pad: true})
			continue
		}
		pos0 := uint64(0)
		// A piece of a delimited unit after the line's first starts a
		// document (after another frame, or a blocked document's span).
		if m.cont && p.off > 0 && !(delimited && i > 0) {
			pos0 = p.off
			if delimited && i == 0 {
				start, err := m.documentStart(s, p.f.unit, p.off)
				if err != nil {
					return err
				}
				pos0 = p.off - start
			}
		}
		m.segs = append(m.segs, segment{start: int(p.at), pos0: pos0})
		if delimited {
			end := int(p.at + p.n)
			for k := int(p.at); k < end-1; k++ {
				if tokens[k] == m.eos {
					m.segs = append(m.segs, segment{start: k + 1})
				}
			}
		}
	}
	if filled < m.line {
		m.segs = append(m.segs, segment{start: filled, pad: true})
	}
	return nil
}

// documentStart is the offset in unit u of the document that holds the
// token at off: just after the last EOS before off, or 0. It reads back
// through the document, so a line that starts deep in a long document of a
// flat file costs a read of that document's start (continue mode only).
func (m *metaWriter) documentStart(s *shard, u, off uint64) (uint64, error) {
	const chunk = 4096
	if cap(m.scratch) < chunk {
		m.scratch = make([]int32, chunk)
	}
	for end := off; end > 0; {
		start := end - min(end, chunk)
		buf := m.scratch[:end-start]
		if err := s.ds.src.Read(u, start, buf); err != nil {
			return 0, err
		}
		for k := len(buf) - 1; k >= 0; k-- {
			if buf[k] == m.eos {
				return start + uint64(k) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// ids writes line b's position_ids and document_ids. Runs are filled by
// copies (memmove) rather than element by element: this is most of the
// metadata's cost.
func (m *metaWriter) ids(b int) {
	row := b * m.line
	next := int32(0) // the next document's id: padding takes none
	for i, sg := range m.segs {
		end := m.line
		if i+1 < len(m.segs) {
			end = m.segs[i+1].start
		}
		id := int32(-1)
		if !sg.pad {
			id = next
			next++
		}
		if m.doc != nil {
			fill(m.doc[row+sg.start:row+end], id)
		}
		if m.pos != nil {
			p := m.pos[row+sg.start : row+end]
			switch {
			case sg.pad:
				clear(p)
			case sg.pos0 == 0:
				copy(p, m.iota)
			default:
				for k := range p {
					p[k] = int32(min(sg.pos0+uint64(k), math.MaxInt32))
				}
			}
		}
	}
}

// fill sets every element of d to v, doubling a filled prefix by copies.
func fill(d []int32, v int32) {
	if len(d) == 0 {
		return
	}
	d[0] = v
	for n := 1; n < len(d); n *= 2 {
		copy(d[n:], d[:n])
	}
}

// lossMask writes line b's loss_mask: label k+1 of input k is learned
// unless it is padding, or (mask) starts another document.
func (m *metaWriter) lossMask(b int, filled int) {
	row := m.loss[b*m.seq : (b+1)*m.seq]
	learned := min(max(filled-1, 0), m.seq)
	copy(row[:learned], m.ones)
	clear(row[learned:])
	for i, sg := range m.segs {
		if sg.pad && sg.start < filled {
			// A blocked document's span: neither its labels nor the
			// label after it (read from padding) are learned.
			end := filled
			if i+1 < len(m.segs) {
				end = m.segs[i+1].start
			}
			clear(row[max(sg.start-1, 0):min(end, m.seq)])
		}
	}
	if m.mask {
		for _, sg := range m.segs {
			if sg.start >= 1 && sg.start <= m.seq && !sg.pad {
				row[sg.start-1] = 0
			}
		}
	}
}

// cuts appends line b's segments over its inputs (the first seq_len
// tokens) to cu_seqlens.
func (m *metaWriter) cuts(b int) {
	m.lineSeg[b] = int32(m.segments)
	base := b * m.seq
	for i, sg := range m.segs {
		if sg.start >= m.seq {
			break
		}
		end := m.line
		if i+1 < len(m.segs) {
			end = m.segs[i+1].start
		}
		end = min(end, m.seq)
		m.segments++
		m.cu[m.segments] = int32(base + end)
		m.maxSeqlen = max(m.maxSeqlen, end-sg.start)
	}
}
