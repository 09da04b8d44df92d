"""Regenerate evals/sample_corpus/reports/solar_report.pdf (a three-page PDF with known text per page) with fpdf2."""
from pathlib import Path
from fpdf import FPDF

PAGES = [
    ("Rooftop solar pilot: summary",
     "The rooftop solar pilot installed 48 photovoltaic panels on the roastery warehouse in March. Each panel is rated at "
     "400 watts, so the array has a peak capacity of 19.2 kilowatts. The project cost 21,500 euros including the inverter "
     "and the mounting rails."),
    ("Energy production",
     "In its first year the array produced 22,900 kilowatt-hours. July was the best month with 2,950 kilowatt-hours and "
     "December the worst with 640 kilowatt-hours. The roaster consumed 61 percent of the solar energy directly; the rest "
     "was exported to the grid at 0.07 euros per kilowatt-hour."),
    ("Payback and recommendations",
     "With electricity at 0.24 euros per kilowatt-hour, the array saves about 4,300 euros a year, a simple payback period "
     "of five years. The report recommends a battery of 10 kilowatt-hours so that the afternoon surplus can run the "
     "evening roast, and cleaning the panels twice a year to limit soiling losses to under 3 percent."),
]

def make(path: Path) -> Path:
    "Write the sample PDF deterministically (fixed creation date)."
    pdf = FPDF()
    pdf.set_creation_date(__import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").timezone.utc))
    for title, body in PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.multi_cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 7, body, new_x="LMARGIN", new_y="NEXT")
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path

if __name__ == "__main__":
    print(make(Path(__file__).parent / "sample_corpus" / "reports" / "solar_report.pdf"))
