"""Math tests: equations are compared by what KaTeX renders, not by their TeX spelling."""

import pytest

from olmocr.bench import equations
from olmocr.bench.records import parse_test


def math_test(tex):
    return parse_test({"type": "math", "pdf": "p.pdf", "page": 1, "id": "m", "math": tex})


@pytest.mark.parametrize("reference, output", [
    (r"\frac{a}{b}", r"$$\frac a b$$"),
    (r"x^{2} + y_{1}", r"\(x^2+y_1\)"),
    (r"\left( x + 1 \right)^{2}", r"$$(x+1)^2$$"),
    (r"\int_{0}^{5} x \, dx", r"\[\int_0^5 x\;dx\]"),
    (r"\int_{0}^{5} x \, dx", r"\[\int_0^5 x dx\]"),  # spacing commands only change spacing
    (r"\sin x", r"$\operatorname{sin}x$"),
    (r"\frac{1}{2}", r"$$\dfrac12$$"),  # display style is already display style
    (r"\binom{n}{k}", r"$${n \choose k}$$"),
    (r"\alpha+\beta = 12", r"$\alpha + \beta = 1{2}$"),
    (r"E = m c^{2}", "\\begin{equation}\nE=mc^2\n\\end{equation}"),
    (r"a+b", r"The sum $$c = a + b$$ holds."),  # the reference inside a longer equation
    (r"a &= b", "$$\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}$$"),  # one line of an alignment
    (r"c &= d \\ a &= b", "\\begin{align} a &= b \\\\ c &= d \\end{align}"),  # each line found
])
def test_equivalent_equations_pass(reference, output):
    ok, why = math_test(reference).run(f"Some text.\n\n{output}\n\nMore text.")
    assert ok, why


@pytest.mark.parametrize("reference, output", [
    (r"\frac{a}{b}", r"$$\frac{b}{a}$$"),
    (r"x_{1}", r"$x^{1}$"),
    (r"\binom{n}{k}", r"$$\left(\frac{n}{k}\right)$$"),  # a fraction bar is drawn
    (r"\mathbf{x} = 1", r"$x = 1$"),
    (r"a \cdot b", r"$a \times b$"),
    (r"\sqrt{2}", r"$\sqrt[3]{2}$"),
    (r"\int_{0}^{5} x \, dx = 3", r"$$\int_0^5 x\,dx = 4$$"),
    (r"x = 5", r"$$2x = 57$$"),  # numbers are whole symbols, not substrings
    (r"a &= b \\ c &= e", "$$\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}$$"),
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"$$\begin{pmatrix}12\\34\end{pmatrix}$$"),
])
def test_different_equations_fail(reference, output):
    ok, why = math_test(reference).run(output)
    assert not ok
    assert "no equation renders like the reference" in why and "closest of 1" in why


def test_failure_explanations():
    assert math_test("x").run("no maths here") == \
        (False, "no equation found in the output ($$…$$, \\[…\\], \\(…\\), $…$ or an environment)")
    ok, why = math_test(r"\frac{").run("$x$")
    assert not ok and why.startswith("the reference equation does not parse in KaTeX")
    ok, why = math_test("x").run(r"$\frac{$ and $y$")
    assert not ok and "1 equation(s) did not parse" in why and "'y'" in why
    ok, why = math_test(r"\mathbf{x}").run("$x$")
    assert "mathvariant=bold" in why


def test_extract_equations():
    md = (r"Cost \$5 and \$6. Inline $x$, \(w\); display $$y$$ and \[z\]." "\n"
          "\\begin{align*} a&=b \\end{align*}")
    assert equations.extract_equations(md) == ["y", "z", r"\begin{align*} a&=b \end{align*}", "x", "w"]


def test_canonical_form_drops_only_spacing_and_style():
    tree = equations.render(r"\displaystyle \left( x \right)\,\quad \mathrm{d}y")
    assert equations.to_text(tree) == "( x ) d[mathvariant=normal] y"


def test_katex_process_restarts_after_dying():
    katex = equations.Katex()
    assert "<mfrac>" in katex.mathml(r"\frac12")
    katex._proc.kill()
    katex._proc.wait()
    assert "<msqrt>" in katex.mathml(r"\sqrt2")
    katex.close()


def test_missing_node_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("OLMOCR_NODE", raising=False)
    with pytest.raises(ValueError, match="need Node.js"):
        equations.Katex().mathml("x")
