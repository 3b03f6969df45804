"""The page people use: the service's root. A PDF or an image dropped (or chosen) there is submitted as a job;
the page follows it (pages done of its pages, long-polled), then shows each page's image beside the text the
model gave it, drawn as the viewer draws it (``olmocr.report.viewer``: markdown, tables and equations; pages
from the text layer marked). The page holds no data: everything comes through the API with the token the user
types (kept for the browser tab only)."""

from __future__ import annotations

from olmocr.formats.html import document, esc, markdown_html

SCRIPT = """<script>
const $ = (id) => document.getElementById(id);
const auth = () => ($('token').value ? {Authorization: 'Bearer ' + $('token').value} : {});
$('token').value = sessionStorage.getItem('olmocr-token') || '';
$('token').addEventListener('change', () => sessionStorage.setItem('olmocr-token', $('token').value));

async function api(path, options = {}) {
  const answer = await fetch(path, {...options, headers: {...auth(), ...(options.headers || {})}});
  if ((answer.headers.get('content-type') || '').startsWith('application/json')) {
    const body = await answer.json();
    if (!answer.ok) throw new Error(body.error || answer.statusText);
    return body;
  }
  if (!answer.ok) throw new Error(answer.statusText);
  return answer;
}

function say(text, failed = false) {
  $('state').textContent = text;
  $('state').className = failed ? 'notice' : 'muted';
}

async function convert(file) {
  $('pages').innerHTML = '';
  const form = new FormData();
  form.append('file', file, file.name);
  if ($('range').value.trim()) form.append('page_range', $('range').value.trim());
  try {
    const job = await api('/v1/jobs', {method: 'POST', body: form});
    say(`${job.filename}: queued, ${job.pages} page(s)`);
    let state = job;
    do {
      state = await api(`/v1/jobs/${job.id}?wait=20`);
      say(`${job.filename}: ${state.status}, ${state.pages_done} of ${state.pages} page(s) converted`);
      $('progress').max = state.pages;
      $('progress').value = state.pages_done;
    } while (!['done', 'failed', 'cancelled'].includes(state.status));
    if (state.status !== 'done') throw new Error(`${state.status}${state.error ? ': ' + state.error : ''}`);
    const view = await api(`/v1/jobs/${job.id}/view`);
    $('pages').innerHTML = await view.text();
    for (const image of document.querySelectorAll('img[data-src]')) {
      const picture = await api(image.dataset.src);
      image.src = URL.createObjectURL(await picture.blob());
    }
    say(`${job.filename}: done, ${state.pages} page(s)`);
  } catch (problem) {
    say(`${file.name}: ${problem.message}`, true);
  }
}

const zone = $('drop');
zone.addEventListener('dragover', (event) => { event.preventDefault(); zone.classList.add('over'); });
zone.addEventListener('dragleave', () => zone.classList.remove('over'));
zone.addEventListener('drop', (event) => {
  event.preventDefault();
  zone.classList.remove('over');
  if (event.dataTransfer.files.length) convert(event.dataTransfer.files[0]);
});
$('file').addEventListener('change', () => { if ($('file').files.length) convert($('file').files[0]); });
</script>"""

STYLE = """<style>
#drop{border:3px dashed #888;border-radius:8px;padding:2.5em;text-align:center;margin:1em 0;background:#fafafa}
#drop.over{background:#e3f2fd;border-color:#1e88e5}progress{width:100%}label{margin-right:1em}
</style>"""


def root_page() -> str:
    body = (f"{STYLE}<h1>olmocr</h1><p class='muted'>Drop a PDF or an image: each page is converted by the "
            "service's model and shown beside its text.</p>"
            "<p><label>token <input id='token' type='password' autocomplete='off'></label>"
            "<label>pages <input id='range' placeholder='all, or 1-3,7'></label></p>"
            "<div id='drop'><p>Drop a document here, or <input id='file' type='file' "
            "accept='application/pdf,image/*'></p></div><p id='state' class='muted'></p>"
            "<progress id='progress' value='0' max='1'></progress><div id='pages'></div>" + SCRIPT)
    return document("olmocr", body)


def pages_html(job_id: str, result: dict) -> str:
    """Each page of a job's result: its image (loaded by the page through the API) beside its text; an
    archive's documents one after another, each under its name; what was not converted, and why."""
    parts = []
    several = len(result["documents"]) > 1
    for number, converted in enumerate(result["documents"]):
        if several:
            parts.append(f"<h2>{esc(converted['name'])}</h2>")
        for page in converted["pages"]:
            marked = page["fallback"]
            note = '<p class="badge fail">text layer (the model gave no usable answer)</p>' if marked else ""
            text = page["text"]
            drawn = markdown_html(text) if text.strip() else "<p class=muted>(no text)</p>"
            parts.append(f'<div class="page pair{" fallback" if marked else ""}" data-page="{page["page"]}">'
                         f'<div><h3>page {page["page"]}</h3><img alt="page {page["page"]}" '
                         f'data-src="/v1/jobs/{esc(job_id)}/pages/{page["page"]}.jpg?document={number}"></div>'
                         f'<div>{note}<div class="markdown">{drawn}</div></div></div>')
    for missed in result["not_converted"]:
        parts.append(f"<p class='fail'>{esc(missed['name'])}: not converted ({esc(missed['reason'])}"
                     f"{': ' + esc(missed['detail']) if missed.get('detail') else ''})</p>")
    return "".join(parts)
