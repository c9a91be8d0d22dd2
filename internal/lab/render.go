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

// ---- Ratio plots (docs/figures.md) ------------------------------------------
//
// The figures page draws each function's rows as ratios to the row they are
// judged against: grouped bars over categories (frame sizes, metrics), lines
// over a numeric axis (rule counts, a soak's seconds), one or more panels
// sharing the x axis. Only what basicfont draws: ASCII, 7×13 px.

// plotSpec is one figure.
type plotSpec struct {
	Width, Height int
	Title         string
	// Stamp is printed small at the bottom right: the report's date and commit.
	Stamp  string
	XLabel string
	// Categories make the x axis categorical and the series grouped bars;
	// without them it is numeric and the series are lines.
	Categories []string
	// XTicks are the numeric axis' labelled positions (already in axis
	// units: log10 for a log axis), XMin and XMax its ends.
	XTicks     []plotTick
	XMin, XMax float64
	// Spans shade x ranges of every panel (a soak's links down); VLines
	// mark moments (its restarts).
	Spans  []plotSpan
	VLines []plotSpan
	Panels []plotPanel
	// Extra legend entries for Spans and VLines.
	Marks []plotMark
}

type plotTick struct {
	V     float64
	Label string
}

type plotSpan struct {
	From, To float64
	Color    color.RGBA
}

type plotMark struct {
	Name  string
	Color color.RGBA
	Line  bool // a thin vertical line rather than a box
}

// plotPanel is one y axis and its series.
type plotPanel struct {
	YLabel string
	LogY   bool
	// Ref draws a dashed horizontal line (1.0: the anchor) named RefLabel in
	// the legend; 0 draws none. Bars on a log axis grow from it.
	Ref      float64
	RefLabel string
	Series   []plotSeries
	// NoValues leaves the values off the points (a soak's hundreds).
	NoValues bool
}

type plotSeries struct {
	Name   string
	Color  color.RGBA
	Points []plotPoint
}

// plotPoint is a value at a category index or a numeric x; Lo and Hi,
// when both are above 0, are drawn as a whisker.
type plotPoint struct {
	X, Y, Lo, Hi float64
}

// Series colours, in the order series are given them.
var plotColors = []color.RGBA{
	{0x3b, 0x6e, 0xa8, 0xff}, // blue
	{0xd9, 0x82, 0x2b, 0xff}, // orange
	{0x4a, 0x9a, 0x4a, 0xff}, // green
	{0xb8, 0x3a, 0x3a, 0xff}, // red
	{0x7b, 0x5e, 0xa7, 0xff}, // purple
	{0x8c, 0x6d, 0x46, 0xff}, // brown
}

var (
	colRef    = color.RGBA{0x55, 0x55, 0x55, 0xff}
	colAxis   = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colStamp  = color.RGBA{0x70, 0x70, 0x70, 0xff}
	colShade  = color.RGBA{0xf6, 0xd5, 0xd5, 0xff}
	colVLine  = color.RGBA{0xa0, 0xa0, 0xa0, 0xff}
	plotLeft  = 96 // y tick labels and the y axis' title
	plotRight = 32
)

// WritePNG draws the figure.
func (s *plotSpec) WritePNG(w io.Writer) error {
	return png.Encode(w, s.draw())
}

func (s *plotSpec) draw() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, s.Width, s.Height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	drawText(img, 16, 34, 2, colText, s.Title)

	// The legend: a line of entries under the title, wrapped.
	type entry struct {
		name string
		draw func(x, y int)
	}
	var entries []entry
	seen := map[string]bool{}
	for _, p := range s.Panels {
		for _, se := range p.Series {
			if seen[se.Name] {
				continue
			}
			seen[se.Name] = true
			c := se.Color
			entries = append(entries, entry{se.Name, func(x, y int) { fill(img, image.Rect(x, y-10, x+12, y+2), c) }})
		}
	}
	for _, p := range s.Panels {
		if p.Ref > 0 && p.RefLabel != "" && !seen[p.RefLabel] {
			seen[p.RefLabel] = true
			entries = append(entries, entry{p.RefLabel, func(x, y int) { dashH(img, x, x+16, y-4, colRef) }})
		}
	}
	for _, m := range s.Marks {
		m := m
		entries = append(entries, entry{m.Name, func(x, y int) {
			if m.Line {
				fill(img, image.Rect(x+5, y-11, x+7, y+3), m.Color)
			} else {
				fill(img, image.Rect(x, y-10, x+12, y+2), m.Color)
			}
		}})
	}
	lx, ly := plotLeft, 62
	for _, e := range entries {
		w := 20 + textWidth(e.name) + 20
		if lx+w > s.Width-plotRight && lx > plotLeft {
			lx, ly = plotLeft, ly+18
		}
		e.draw(lx, ly)
		drawText(img, lx+20, ly, 1, colText, e.name)
		lx += w
	}

	top := ly + 22
	bottom := s.Height - 62 // x tick labels, the x axis' title, the stamp
	x0, x1 := plotLeft, s.Width-plotRight
	gap := 28
	n := len(s.Panels)
	if n == 0 {
		return img
	}
	ph := (bottom - top - gap*(n-1)) / n

	// x: categories or numbers.
	var xPos func(float64) int
	if len(s.Categories) > 0 {
		cw := float64(x1-x0) / float64(len(s.Categories))
		xPos = func(v float64) int { return x0 + int(math.Round((v+0.5)*cw)) }
	} else {
		span := s.XMax - s.XMin
		if span <= 0 {
			span = 1
		}
		xPos = func(v float64) int { return x0 + int(math.Round((v-s.XMin)/span*float64(x1-x0))) }
	}

	for pi, p := range s.Panels {
		pt := top + pi*(ph+gap)
		pb := pt + ph
		s.drawPanel(img, p, x0, x1, pt, pb, xPos)
		// x ticks under the last panel only; grid lines in each.
		last := pi == n-1
		if len(s.Categories) > 0 {
			if last {
				for i, c := range s.Categories {
					x := xPos(float64(i))
					drawText(img, x-textWidth(c)/2, pb+20, 1, colText, c)
				}
			}
		} else {
			for _, t := range s.XTicks {
				x := xPos(t.V)
				fill(img, image.Rect(x, pb, x+1, pb+5), colAxis)
				if last {
					drawText(img, x-textWidth(t.Label)/2, pb+20, 1, colText, t.Label)
				}
			}
		}
	}
	drawText(img, (x0+x1-textWidth(s.XLabel))/2, bottom+40, 1, colText, s.XLabel)
	if s.Stamp != "" {
		drawText(img, s.Width-plotRight-textWidth(s.Stamp), s.Height-6, 1, colStamp, s.Stamp)
	}
	return img
}

// drawPanel draws one panel's axes, grid, reference line and series
// between x0..x1 and pt..pb.
func (s *plotSpec) drawPanel(img *image.RGBA, p plotPanel, x0, x1, pt, pb int, xPos func(float64) int) {
	// The y range covers every value, whisker and the reference line.
	lo, hi := math.Inf(1), math.Inf(-1)
	see := func(v float64) {
		if v > 0 || (!p.LogY && v == 0) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	for _, se := range p.Series {
		for _, q := range se.Points {
			see(q.Y)
			if q.Lo > 0 && q.Hi > 0 {
				see(q.Lo)
				see(q.Hi)
			}
		}
	}
	if p.Ref > 0 {
		see(p.Ref)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	var yPos func(float64) int
	var ticks []plotTick
	if p.LogY {
		ymin, ymax, t := logTicks(lo, hi)
		ticks = t
		yPos = func(v float64) int {
			if !(v > 0) {
				return pb
			}
			f := (math.Log10(v) - math.Log10(ymin)) / (math.Log10(ymax) - math.Log10(ymin))
			return pb - int(math.Round(math.Max(0, math.Min(1, f))*float64(pb-pt)))
		}
	} else {
		// Room above the highest value for its label.
		top, step := axisScale([]chartBar{{median: hi * 1.08}})
		for v := 0.0; v <= top+step/2; v += step {
			ticks = append(ticks, plotTick{v, trimFloat(v)})
		}
		yPos = func(v float64) int {
			if !(v > 0) {
				return pb
			}
			return pb - int(math.Round(math.Min(v, top)/top*float64(pb-pt)))
		}
	}

	for _, sp := range s.Spans {
		a, b := xPos(sp.From), xPos(sp.To)
		if b > a {
			fill(img, image.Rect(max(a, x0+1), pt, min(b, x1), pb), sp.Color)
		}
	}
	for _, t := range ticks {
		y := yPos(t.V)
		fill(img, image.Rect(x0+1, y, x1, y+1), colGrid)
		fill(img, image.Rect(x0-5, y, x0, y+1), colAxis)
		drawText(img, x0-9-textWidth(t.Label), y+5, 1, colText, t.Label)
	}
	for _, v := range s.VLines {
		x := xPos(v.From)
		fill(img, image.Rect(x, pt, x+1, pb), v.Color)
	}
	fill(img, image.Rect(x0, pt, x0+1, pb+1), colAxis)
	fill(img, image.Rect(x0, pb, x1, pb+1), colAxis)
	drawTextUp(img, 18, (pt+pb)/2+textWidth(p.YLabel)/2, colText, p.YLabel)

	var labels []image.Rectangle
	type valueLabel struct {
		text  string
		at    image.Point
		color color.Color
	}
	var texts []valueLabel
	// place puts a value's label at the first of the candidate spots where
	// it overlaps no other label or marker, or not at all. Labels are
	// drawn last, on white, over lines and the reference line.
	place := func(text string, c color.Color, spots []image.Point) {
		w := textWidth(text)
		for _, sp := range spots {
			r := image.Rect(sp.X, sp.Y-11, sp.X+w, sp.Y+3)
			if r.Min.X < x0+2 || r.Max.X > s.Width-2 || r.Min.Y < pt-14 || r.Max.Y > pb+16 {
				continue
			}
			if slices.ContainsFunc(labels, r.Overlaps) {
				continue
			}
			labels = append(labels, r)
			texts = append(texts, valueLabel{text, sp, c})
			return
		}
	}

	if len(s.Categories) > 0 {
		// Grouped bars: a slot per series in every category, so that a
		// series keeps its place where another did not run.
		cw := float64(x1-x0) / float64(len(s.Categories))
		ns := len(p.Series)
		bw := min(int(cw*0.8/float64(max(ns, 1))), 120)
		left := bw * ns / 2 // the group's half width
		base := pb
		if p.LogY {
			base = yPos(p.Ref)
			if p.Ref <= 0 {
				base = pb
			}
		}
		for si, se := range p.Series {
			for _, q := range se.Points {
				cx := xPos(q.X) - left + si*bw
				y := yPos(q.Y)
				a, b := min(y, base), max(y, base)
				if b == a {
					b = a + 1
				}
				fill(img, image.Rect(cx+2, a, cx+bw-2, b), se.Color)
				mid := cx + bw/2
				end := y
				if q.Lo > 0 && q.Hi > 0 && yPos(q.Lo)-yPos(q.Hi) > 2 {
					yl, yh := yPos(q.Lo), yPos(q.Hi)
					fill(img, image.Rect(mid-1, yh, mid+1, yl+1), colWhisker)
					fill(img, image.Rect(mid-5, yh, mid+6, yh+2), colWhisker)
					fill(img, image.Rect(mid-5, yl-1, mid+6, yl+1), colWhisker)
					if y <= base {
						end = min(end, yh)
					} else {
						end = max(end, yl)
					}
				}
				v := figure(q.Y)
				tw := textWidth(v)
				if y <= base {
					place(v, colText, []image.Point{{mid - tw/2, end - 5}, {mid - tw/2, end - 19}})
				} else {
					place(v, colText, []image.Point{{mid - tw/2, end + 15}, {mid - tw/2, end + 29}})
				}
			}
		}
	} else {
		for _, se := range p.Series {
			pts := slices.Clone(se.Points)
			slices.SortFunc(pts, func(a, b plotPoint) int { return cmpFloat(a.X, b.X) })
			for i := 1; i < len(pts); i++ {
				drawLine(img, xPos(pts[i-1].X), yPos(pts[i-1].Y), xPos(pts[i].X), yPos(pts[i].Y), se.Color)
			}
			if p.NoValues {
				continue
			}
			for _, q := range pts {
				x, y := xPos(q.X), yPos(q.Y)
				if q.Lo > 0 && q.Hi > 0 {
					yl, yh := yPos(q.Lo), yPos(q.Hi)
					fill(img, image.Rect(x-1, yh, x+1, yl+1), se.Color)
				}
				fill(img, image.Rect(x-4, y-4, x+5, y+5), se.Color)
				labels = append(labels, image.Rect(x-4, y-4, x+5, y+5))
			}
		}
		if !p.NoValues {
			for _, se := range p.Series {
				for _, q := range se.Points {
					x, y := xPos(q.X), yPos(q.Y)
					v := figure(q.Y)
					tw := textWidth(v)
					// Above or below a line rather than on it, first.
					place(v, se.Color, []image.Point{{x + 7, y - 8}, {x + 7, y + 18}, {x - 7 - tw, y - 8}, {x - 7 - tw, y + 18}, {x + 9, y + 5}, {x - 9 - tw, y + 5}, {x - tw/2, y - 10}, {x - tw/2, y + 20}})
				}
			}
		}
	}
	if p.Ref > 0 {
		dashH(img, x0+1, x1, yPos(p.Ref), colRef)
	}
	for _, l := range texts {
		fill(img, image.Rect(l.at.X-2, l.at.Y-11, l.at.X+textWidth(l.text)+2, l.at.Y+3), color.White)
		drawText(img, l.at.X, l.at.Y, 1, l.color, l.text)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// logTicks are the ends of a log axis around lo..hi and its ticks: 1, 2
// and 5 times the powers of ten, or only the powers when the range is wide.
func logTicks(lo, hi float64) (ymin, ymax float64, ticks []plotTick) {
	steps := []float64{1, 2, 5}
	down := func(v float64) float64 {
		p := math.Pow(10, math.Floor(math.Log10(v)))
		for i := len(steps) - 1; i >= 0; i-- {
			if steps[i]*p <= v*(1+1e-9) {
				return steps[i] * p
			}
		}
		return p
	}
	up := func(v float64) float64 {
		p := math.Pow(10, math.Floor(math.Log10(v)))
		for _, m := range append(steps, 10) {
			if m*p >= v*(1-1e-9) {
				return m * p
			}
		}
		return 10 * p
	}
	// A little room beyond the values for their labels.
	ymin, ymax = down(lo/1.15), up(hi*1.15)
	if math.Log10(ymax/ymin) > 4 {
		steps = []float64{1}
	}
	for e := math.Floor(math.Log10(ymin)); e <= math.Ceil(math.Log10(ymax)); e++ {
		for _, m := range steps {
			v := m * math.Pow(10, e)
			if v >= ymin*(1-1e-9) && v <= ymax*(1+1e-9) {
				ticks = append(ticks, plotTick{v, strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ymin, ymax, ticks
}

// dashH draws a dashed horizontal line two pixels thick.
func dashH(img *image.RGBA, xa, xb, y int, c color.Color) {
	for x := xa; x < xb; x += 10 {
		fill(img, image.Rect(x, y-1, min(x+6, xb), y+1), c)
	}
}

// drawLine draws a line two pixels thick.
func drawLine(img *image.RGBA, xa, ya, xb, yb int, c color.Color) {
	n := max(abs(xb-xa), abs(yb-ya), 1)
	for i := 0; i <= n; i++ {
		x := xa + (xb-xa)*i/n
		y := ya + (yb-ya)*i/n
		fill(img, image.Rect(x-1, y-1, x+1, y+1), c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// drawTextUp draws s turned a quarter left, reading upwards, with its
// first letter's bottom at (x, y): a y axis' title.
func drawTextUp(dst draw.Image, x, y int, c color.Color, s string) {
	s = ascii(s)
	face := basicfont.Face7x13
	w := textWidth(s)
	mask := image.NewAlpha(image.Rect(0, 0, w, face.Height))
	d := font.Drawer{Dst: mask, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	src := image.NewUniform(c)
	for my := range face.Height {
		for mx := range w {
			if mask.AlphaAt(mx, my).A == 0 {
				continue
			}
			// (mx, my) → (x+my, y-mx): the text's top faces left.
			p := image.Rect(x+my, y-mx-1, x+my+1, y-mx)
			draw.Draw(dst, p, src, image.Point{}, draw.Over)
		}
	}
}
