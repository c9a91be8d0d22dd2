package lab

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Finish fills each row's derived figures from its runs. It leaves
// Scenario, Description, Size and Note alone, so it can be called again after
// runs are added.
func (r *Report) Finish() {
	for i := range r.Rows {
		row := &r.Rows[i]
		mpps := make([]float64, 0, len(row.Runs))
		loss := make([]float64, 0, len(row.Runs))
		for _, run := range row.Runs {
			mpps = append(mpps, run.Mpps)
			loss = append(loss, lossOf(run))
		}
		row.MedianMpps = median(mpps)
		row.MinMpps, row.MaxMpps = 0, 0
		if len(mpps) > 0 {
			row.MinMpps, row.MaxMpps = slices.Min(mpps), slices.Max(mpps)
		}
		row.NsPerPacket = 0
		if row.MedianMpps > 0 {
			row.NsPerPacket = 1e3 / row.MedianMpps
		}
		row.Loss = median(loss)
	}
	r.CeilingMpps, r.VethOfCeiling = 0, 0
	if sizes := r.sizes(); len(sizes) > 0 {
		r.CeilingMpps, r.VethOfCeiling = r.ceilingAt(sizes[0])
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		row.Ratio = 0
		row.RatioOtherSize = false
		if base := r.baselineMpps(row.Size); base > 0 {
			row.Ratio = row.MedianMpps / base
		} else if base, ok := r.onlyBaseline(); ok {
			row.Ratio, row.RatioOtherSize = row.MedianMpps/base, true
		}
		// An anchor is only ever taken at the row's own size: the
		// anchor ratio is what the record compares, and a ratio across
		// sizes would move with the size mix rather than with the code.
		row.AnchorMpps, row.AnchorRatio = 0, 0
		if a, ok := r.find(row.Anchor, row.Size); ok && row.Anchor != "" && a.MedianMpps > 0 {
			row.AnchorMpps, row.AnchorRatio = a.MedianMpps, row.MedianMpps/a.MedianMpps
		}
	}
}

// find returns the row of a scenario at a frame size.
func (r *Report) find(scenario string, size int) (Row, bool) {
	for _, row := range r.Rows {
		if row.Scenario == scenario && row.Size == size {
			return row, true
		}
	}
	return Row{}, false
}

// sizes are the frame sizes of the rows, in the order they first appear.
func (r *Report) sizes() []int {
	var out []int
	for _, row := range r.Rows {
		if !slices.Contains(out, row.Size) {
			out = append(out, row.Size)
		}
	}
	return out
}

// ceilingAt is the ceiling row's median at a frame size and the veth row's
// share of it there; zeros for a missing row.
func (r *Report) ceilingAt(size int) (mpps, vethShare float64) {
	c, ok := r.find(CeilingScenario, size)
	if !ok || c.MedianMpps == 0 {
		return 0, 0
	}
	if v, ok := r.find("veth", size); ok {
		return c.MedianMpps, v.MedianMpps / c.MedianMpps
	}
	return c.MedianMpps, 0
}

// onlyBaseline is the baseline's median when it ran at one frame size only.
func (r *Report) onlyBaseline() (float64, bool) {
	var mpps float64
	n := 0
	for _, row := range r.Rows {
		if row.Scenario == r.Baseline {
			mpps = row.MedianMpps
			n++
		}
	}
	return mpps, n == 1 && mpps > 0
}

// baselineMpps returns the median Mpps of the baseline scenario at the given
// frame size, or 0. Matching the size keeps a 1500 B row from being divided by
// a 64 B baseline when one run sweeps sizes.
func (r *Report) baselineMpps(size int) float64 {
	if r.Baseline == "" {
		return 0
	}
	for _, row := range r.Rows {
		if row.Scenario == r.Baseline && row.Size == size {
			return row.MedianMpps
		}
	}
	return 0
}

// hasRatio says the row's Ratio was taken (to a baseline that ran and
// moved packets), even if the row's own rate, and so the ratio, is 0.
func (r *Report) hasRatio(row Row) bool {
	return r.baselineMpps(row.Size) > 0 || row.RatioOtherSize
}

// lossOf is the fraction of sent packets the sink did not count. A sink that
// counted more than was sent (stray traffic) is not negative loss.
func lossOf(run Run) float64 {
	if run.Sent == 0 {
		return 0
	}
	return max(0, (float64(run.Sent)-float64(run.Received))/float64(run.Sent))
}

// median of xs without reordering them; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// column is one column of the terminal and the Markdown table.
type column struct {
	head  string
	right bool // numeric: aligned right
	cell  func(r *Report, row Row) string
}

// columns are the table's columns: the anchor's only when a row has one,
// the record's only when the report was compared with one.
func (r *Report) columns() []column {
	cols := []column{
		{"scenario", false, func(_ *Report, row Row) string { return row.Scenario }},
		{"size (B)", true, func(_ *Report, row Row) string { return fmt.Sprint(row.Size) }},
		{"Mpps", true, func(_ *Report, row Row) string { return fmt.Sprintf("%.2f", row.MedianMpps) }},
		{"min–max", true, func(_ *Report, row Row) string { return fmt.Sprintf("%.2f–%.2f", row.MinMpps, row.MaxMpps) }},
		{"ns/pkt", true, func(_ *Report, row Row) string { return fmt.Sprintf("%.1f", row.NsPerPacket) }},
		{"ratio", true, (*Report).ratioCell},
	}
	if r.anchored() {
		cols = append(cols, column{"to anchor", false, func(_ *Report, row Row) string { return anchorCell(row) }})
	}
	if r.Record != nil {
		cols = append(cols, column{"vs record", false, func(_ *Report, row Row) string { return row.VsRecord.String() }})
	}
	return append(cols,
		column{"loss", true, func(_ *Report, row Row) string { return fmt.Sprintf("%.1f%%", row.Loss*100) }},
		column{"note", false, func(_ *Report, row Row) string { return row.Note }},
	)
}

func (r *Report) ratioCell(row Row) string {
	if r.Baseline == "" || row.Ratio == 0 {
		return "—"
	}
	s := fmt.Sprintf("%.2f×", row.Ratio)
	if row.RatioOtherSize {
		s += "*"
	}
	return s
}

// anchorCell is e.g. "0.49× xdp-redirect"; it names the anchor also when
// the anchor did not run at the row's size.
func anchorCell(row Row) string {
	switch {
	case row.Anchor == "":
		return "—"
	case row.AnchorMpps == 0:
		return row.Anchor + " not run"
	}
	return figure(row.AnchorRatio) + "× " + row.Anchor
}

// figure prints a ratio or a rate with two decimals, or two significant
// digits below 0.1, where two decimals would round iptables' 0.0072× to 0.01.
func figure(v float64) string {
	if math.Abs(v) < 0.095 && v != 0 {
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	return fmt.Sprintf("%.2f", v)
}

// table is the header and the cells of every row.
func (r *Report) table() (lines [][]string, right []bool) {
	cols := r.columns()
	head := make([]string, len(cols))
	right = make([]bool, len(cols))
	for i, c := range cols {
		head[i], right[i] = c.head, c.right
	}
	lines = [][]string{head}
	for _, row := range r.Rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c.cell(r, row)
		}
		lines = append(lines, cells)
	}
	return lines, right
}

// Table renders the report as a fixed-width table for a terminal.
func (r *Report) Table() string {
	lines, right := r.table()
	var b strings.Builder
	b.WriteString(TextTable(lines, right))
	if r.Baseline != "" {
		fmt.Fprintf(&b, "ratio: Mpps / Mpps of %s at the same size in the same run; ", r.Baseline)
	}
	b.WriteString("ns/pkt: whole path on one core\n")
	if r.otherSizes() {
		fmt.Fprintf(&b, "*: frames of another size than %s's, divided by its rate all the same\n", r.Baseline)
	}
	if r.anchored() {
		b.WriteString(anchorLine + "\n")
	}
	for _, line := range r.ceilingLines() {
		b.WriteString(line + "\n")
	}
	if line := r.Record.String(); line != "" {
		b.WriteString(line + "\n")
	}
	if line := r.generatorLine(); line != "" {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// anchored says a row has an anchor, and the table its column.
func (r *Report) anchored() bool {
	return slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Anchor != "" })
}

const anchorLine = "to anchor: Mpps / Mpps of the row's own comparison (its function's, e.g. xdp-redirect for the border router) at the same size in the same run"

// generatorLine says at which sizes the frames did not come as live
// frames; "" when all did.
func (r *Report) generatorLine() string {
	var sizes []string
	for _, row := range r.Rows {
		if s := fmt.Sprintf("%d B", row.Size); row.Generator != "" && row.Generator != MethodLiveFrames && !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	if len(sizes) == 0 {
		return ""
	}
	return fmt.Sprintf("generator at %s: an AF_PACKET socket on one core, for frames over the %d B live frames take: skbs, so its ceiling is lower", strings.Join(sizes, ", "), LiveMaxFrame)
}

func (r *Report) otherSizes() bool {
	for _, row := range r.Rows {
		if row.RatioOtherSize {
			return true
		}
	}
	return false
}

// ceilingLines say, at each size, how close the generator's veth row comes
// to the generator alone; none without a ceiling row.
func (r *Report) ceilingLines() []string {
	sizes := r.sizes()
	var lines []string
	for _, size := range sizes {
		mpps, share := r.ceilingAt(size)
		if mpps == 0 {
			continue
		}
		at := ""
		if len(sizes) > 1 {
			at = fmt.Sprintf(" at %d B", size)
		}
		line := fmt.Sprintf("generator ceiling (one fixed frame, nothing written)%s: %.2f Mpps", at, mpps)
		if share > 0 {
			line += fmt.Sprintf("; the veth row reaches %.2f of it", share)
		}
		lines = append(lines, line)
	}
	return lines
}

// Markdown renders the report as a Markdown document for docs and PRs.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# fastpath lab bench\n\n")
	fmt.Fprintf(&b, "- date: %s\n", r.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "- command: `%s`\n", r.Command)
	fmt.Fprintf(&b, "- kernel: %s\n", r.Kernel)
	fmt.Fprintf(&b, "- CPU: %s (%d CPUs)\n", r.CPUModel, r.CPUs)
	if r.Commit != "" {
		fmt.Fprintf(&b, "- commit: %s\n", r.Commit)
	}
	if r.Baseline != "" {
		fmt.Fprintf(&b, "- ratio: Mpps / Mpps of %s at the same size in the same run\n", r.Baseline)
	}
	if r.otherSizes() {
		fmt.Fprintf(&b, "- *: frames of another size than %s's, divided by its rate all the same\n", r.Baseline)
	}
	if r.anchored() {
		b.WriteString("- " + anchorLine + "\n")
	}
	if r.Restore {
		b.WriteString("- generator: every packet written whole on each run (a DUT rewrites frames)\n")
	} else {
		b.WriteString("- generator: only the bytes where the packets differ written on each run\n")
	}
	b.WriteString("- one core runs generator, DUT and sink: ns/pkt is the whole path's cost\n")
	for _, line := range r.ceilingLines() {
		b.WriteString("- " + line + "\n")
	}
	if line := r.Record.String(); line != "" {
		b.WriteString("- " + line + "\n")
	}
	if line := r.generatorLine(); line != "" {
		b.WriteString("- " + line + "\n")
	}
	b.WriteString("\n")

	lines, right := r.table()
	mdRow(&b, lines[0])
	for _, right := range right {
		b.WriteString("|---")
		if right {
			b.WriteString(":")
		}
	}
	b.WriteString("|\n")
	for _, cells := range lines[1:] {
		mdRow(&b, cells)
	}

	if len(r.Rows) > 0 {
		b.WriteString("\nMpps of each run:\n\n")
	}
	for _, row := range r.Rows {
		runs := make([]string, len(row.Runs))
		for i, run := range row.Runs {
			runs[i] = fmt.Sprintf("%.2f", run.Mpps)
		}
		fmt.Fprintf(&b, "- %s (%d B) runs: %s\n", row.Scenario, row.Size, strings.Join(runs, ", "))
	}
	return b.String()
}

// mdRow writes one table line; a "|" in a note would otherwise split its cell.
func mdRow(b *strings.Builder, cells []string) {
	for _, c := range cells {
		fmt.Fprintf(b, "| %s ", strings.ReplaceAll(c, "|", `\|`))
	}
	b.WriteString("|\n")
}

// Chart geometry in pixels; the height grows with the number of rows.
const (
	chartWidth  = 900
	chartTop    = 50 // title
	chartBottom = 70 // tick labels and axis label
	rowHeight   = 60
	barHeight   = 30
	maxLabel    = 28 // runes of a scenario name before it is cut
)

var (
	colBar      = color.RGBA{0x3b, 0x6e, 0xa8, 0xff}
	colBaseline = color.RGBA{0x99, 0x99, 0x99, 0xff}
	colWhisker  = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colGrid     = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	colText     = color.Black
)

// WritePNG draws a horizontal bar chart of each row's median Mpps with a
// min–max whisker and writes it as PNG. The baseline's bar is grey.
func (r *Report) WritePNG(w io.Writer) error {
	bars := make([]chartBar, len(r.Rows))
	several := len(r.sizes()) > 1
	for i, row := range r.Rows {
		name := row.Scenario
		if several {
			name = fmt.Sprintf("%s %d B", row.Scenario, row.Size)
		}
		bars[i] = chartBar{name, row.MedianMpps, row.MinMpps, row.MaxMpps, row.Scenario == r.Baseline}
	}
	return writeChart(w, r.title(), "Mpps delivered at the sink (bar: median, whisker: min-max)", bars)
}

// chartBar is one row of a bar chart.
type chartBar struct {
	name           string
	median, lo, hi float64
	baseline       bool
}

// writeChart draws horizontal bars with min–max whiskers as PNG.
func writeChart(w io.Writer, title, axis string, bars []chartBar) error {
	height := chartTop + chartBottom + rowHeight*len(bars)
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)

	drawText(img, 16, 32, 2, colText, title)
	if len(bars) == 0 {
		drawText(img, 16, chartTop+30, 1, colText, "no scenarios were run")
		return png.Encode(w, img)
	}

	labelW := 0
	for _, b := range bars {
		labelW = max(labelW, textWidth(label(b.name)))
	}
	// Room on the right for a value printed past a short bar's whisker.
	x0, x1 := 24+labelW+8, chartWidth-80
	yAxis := height - chartBottom

	top, step := axisScale(bars)
	scale := func(v float64) int {
		// !(v > 0) also catches NaN, whose int conversion is undefined.
		if !(v > 0) {
			return x0
		}
		return x0 + int(math.Round(min(v, top)/top*float64(x1-x0)))
	}

	for v := 0.0; v <= top+step/2; v += step {
		x := scale(v)
		fill(img, image.Rect(x, chartTop, x+1, yAxis), colGrid)
		fill(img, image.Rect(x, yAxis, x+1, yAxis+5), colText)
		s := trimFloat(v)
		drawText(img, x-textWidth(s)/2, yAxis+18, 1, colText, s)
	}
	fill(img, image.Rect(x0, yAxis, x1+1, yAxis+1), colText)
	fill(img, image.Rect(x0, chartTop, x0+1, yAxis), colText)
	drawText(img, (x0+x1-textWidth(axis))/2, yAxis+46, 1, colText, axis)

	for i, b := range bars {
		cy := chartTop + i*rowHeight + rowHeight/2
		name := label(b.name)
		drawText(img, x0-8-textWidth(name), cy+5, 1, colText, name)

		bar := colBar
		if b.baseline {
			bar = colBaseline
		}
		// image.Rect swaps reversed corners, so a zero bar must be skipped
		// rather than drawn from x0+1 back to x0.
		xm := scale(b.median)
		if xm > x0+1 {
			fill(img, image.Rect(x0+1, cy-barHeight/2, xm, cy+barHeight/2), bar)
		}

		lo, hi := scale(b.lo), scale(b.hi)
		fill(img, image.Rect(lo, cy-1, hi+1, cy+1), colWhisker)
		fill(img, image.Rect(lo, cy-8, lo+2, cy+8), colWhisker)
		fill(img, image.Rect(hi-1, cy-8, hi+1, cy+8), colWhisker)

		// The value goes inside the bar's left end when it fits, clear of
		// the whisker at its right end; otherwise after the whisker.
		v := fmt.Sprintf("%.2f", b.median)
		if xm-x0 >= textWidth(v)+2*12 && lo-x0 >= textWidth(v)+12 {
			drawText(img, x0+8, cy+5, 1, color.White, v)
		} else {
			drawText(img, max(xm, hi)+8, cy+5, 1, colText, v)
		}
	}
	return png.Encode(w, img)
}

// title names the frame size when all rows share one.
func (r *Report) title() string {
	t := "fastpath lab bench - Mpps"
	sizes := map[int]bool{}
	for _, row := range r.Rows {
		sizes[row.Size] = true
	}
	switch {
	case len(sizes) == 1:
		return fmt.Sprintf("%s (%d B frames)", t, r.Rows[0].Size)
	case len(sizes) > 1:
		return t + " (mixed frame sizes)"
	}
	return t
}

// axisScale picks the axis end and tick step: 1, 2 or 5 times a power of ten,
// about six ticks, covering every whisker.
func axisScale(bars []chartBar) (top, step float64) {
	hi := 0.0
	for _, b := range bars {
		for _, v := range []float64{b.median, b.hi} {
			if v > hi && !math.IsInf(v, 1) {
				hi = v
			}
		}
	}
	if hi == 0 {
		return 1, 0.2
	}
	raw := hi / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(hi/step) * step, step
}

// trimFloat prints a tick value without trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// label cuts long scenario names so the bars keep most of the width, and
// replaces what basicfont cannot draw (it has ASCII only).
func label(s string) string {
	s = ascii(s)
	if len(s) > maxLabel {
		s = s[:maxLabel-3] + "..."
	}
	return s
}

func ascii(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '–' || r == '—':
			return '-'
		case r < 0x20 || r > 0x7e:
			return '?'
		}
		return r
	}, s)
}

func textWidth(s string) int {
	return len([]rune(s)) * basicfont.Face7x13.Advance
}

func fill(img draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// drawText draws s with its baseline at y, scaled by an integer factor:
// basicfont is a 13 px bitmap font, too small for a title at 1×.
func drawText(dst draw.Image, x, y, scale int, c color.Color, s string) {
	s = ascii(s)
	face := basicfont.Face7x13
	if scale == 1 {
		d := font.Drawer{Dst: dst, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
		d.DrawString(s)
		return
	}
	mask := image.NewAlpha(image.Rect(0, 0, textWidth(s), face.Height))
	d := font.Drawer{Dst: mask, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	src := image.NewUniform(c)
	top := y - face.Ascent*scale
	for my := range face.Height {
		for mx := range mask.Rect.Dx() {
			if mask.AlphaAt(mx, my).A == 0 {
				continue
			}
			p := image.Rect(x+mx*scale, top+my*scale, x+(mx+1)*scale, top+(my+1)*scale)
			draw.Draw(dst, p, src, image.Point{}, draw.Over)
		}
	}
}
