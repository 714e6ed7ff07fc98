
(function(){
"use strict";
function el(tag, cls, text){var e=document.createElement(tag);if(cls)e.className=cls;
  if(text!==undefined&&text!==null)e.textContent=String(text);return e;}
function fmt(v){return v===null||v===undefined?"–":String(v);}
function dataOf(d){var s=d.querySelector("script.cell-data");return s?JSON.parse(s.textContent):null;}
function renderResources(data){
  var t=el("table","res");var h=t.insertRow();["resource","golden","head","Δ"].forEach(function(x){h.appendChild(el("th",null,x));});
  data.resources.forEach(function(r){var tr=t.insertRow();var moved=r[1]!==r[2]&&!(r[1]===null&&data.verdict==="new");
    if(moved&&data.verdict!=="new")tr.className="moved";
    tr.appendChild(el("td",null,r[0]));tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));
    var d=el("td");if(typeof r[1]==="number"&&typeof r[2]==="number"&&r[1]!==r[2]){var n=r[2]-r[1];
      d.textContent=(n>0?"+":"")+n;d.className=(r[0]==="occupancy"?(n<0?"up":"down"):(n>0?"up":"down"));}
    tr.appendChild(d);});
  return t;}
function renderHistogram(data){
  var wrap=el("div");var label={delta:"histogram: golden vs head, largest changes first",
    head:"histogram (head, no golden): most frequent first",base:"histogram (golden only): most frequent first"};
  wrap.appendChild(el("div","muted",label[data.histogram_kind]||"histogram"));
  if(!data.histogram.length){wrap.appendChild(el("div","muted","no mnemonic count changed"));return wrap;}
  var max=1;data.histogram.forEach(function(r){max=Math.max(max,r[1]||0,r[2]||0);});
  var t=el("table","hist");var h=t.insertRow();["mnemonic","golden","head","Δ",""].forEach(function(x){h.appendChild(el("th",null,x));});
  data.histogram.forEach(function(r){var tr=t.insertRow();tr.appendChild(el("td",null,r[0]));
    tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));
    var d=el("td");if(r[1]!==null&&r[2]!==null){var n=r[2]-r[1];d.textContent=(n>0?"+":"")+n;d.className=n>0?"up":"down";}
    tr.appendChild(d);var bars=el("td","bars");
    if(r[1]!==null){var b=el("span","bar base");b.style.width=(100*r[1]/max)+"%";b.title="golden "+r[1];bars.appendChild(b);}
    if(r[2]!==null){var c=el("span","bar head");c.style.width=(100*r[2]/max)+"%";c.title="head "+r[2];bars.appendChild(c);}
    tr.appendChild(bars);});
  wrap.appendChild(t);return wrap;}
function renderDiffTable(diff){
  var wrap=el("div","diff-wrap");
  var t=el("table","diff");var cg=el("colgroup");["no","","no",""].forEach(function(c){var col=el("col");if(c)col.className=c;cg.appendChild(col);});
  t.appendChild(cg);var h=t.insertRow();h.appendChild(el("th",null,""));h.appendChild(el("th",null,"golden"));
  h.appendChild(el("th",null,""));h.appendChild(el("th",null,"head"));
  diff.rows.forEach(function(r){var tr=t.insertRow();tr.className=r[0];
    if(r[0]==="gap"){var g=el("td",null,"… "+r[2]+" …");g.colSpan=4;tr.appendChild(g);return;}
    tr.appendChild(el("td","no",r[1]===null?"":r[1]));tr.appendChild(el("td","l",r[2]));
    tr.appendChild(el("td","no",r[3]===null?"":r[3]));tr.appendChild(el("td","r",r[4]===null?r[2]:r[4]));});
  if(diff.truncated)wrap.appendChild(el("div","muted","cut after the first "+diff.rows.length+" rows"));
  wrap.insertBefore(t,wrap.firstChild);return wrap;}
function diffSummary(diff){return diff.removed+" lines removed, "+diff.added+" added ("+diff.base_lines+" → "+
  diff.head_lines+" lines)"+(diff.renamed?"; "+diff.renamed+" more differ only in register numbers":"");}
function renderDiffs(data){
  var wrap=el("div","diffs");var views=[];
  if(data.register_diff)views.push({key:"registers",label:"registers abstracted: "+diffSummary(data.register_diff),diff:data.register_diff});
  views.push({key:"exact",label:"exact: "+diffSummary(data.diff),diff:data.diff});
  var bar=el("div","tabs");wrap.appendChild(bar);var bodies=[];
  views.forEach(function(v,i){var b=el("button","tab"+(i===0?" active":""),v.label);b.type="button";b.dataset.view=v.key;bar.appendChild(b);
    var body=renderDiffTable(v.diff);body.dataset.view=v.key;if(i>0)body.classList.add("hidden");bodies.push(body);wrap.appendChild(body);
    b.addEventListener("click",function(){Array.prototype.forEach.call(bar.children,function(x){x.classList.toggle("active",x===b);});
      bodies.forEach(function(x){x.classList.toggle("hidden",x.dataset.view!==v.key);});});});
  wrap.insertBefore(el("div","muted","normalized instruction stream, golden vs head"+(views.length>1?
    " (registers abstracted: v12 → vN, s[4:5] → s[N:N+1], R12 → RN, so renumbered registers align)":"")),bar);
  return wrap;}
function renderBinding(data){
  var wrap=el("div");wrap.appendChild(el("div","muted","launch binding: golden vs head (what differs)"));
  var t=el("table","res binding");var h=t.insertRow();["field","golden","head"].forEach(function(x){h.appendChild(el("th",null,x));});
  data.binding.forEach(function(r){var tr=t.insertRow();tr.className="moved";tr.appendChild(el("td",null,r[0]));
    tr.appendChild(el("td",null,r[1]===null?"(none)":JSON.stringify(r[1])));tr.appendChild(el("td",null,r[2]===null?"(none)":JSON.stringify(r[2])));});
  wrap.appendChild(t);return wrap;}
function renderLoops(data){
  var wrap=el("div");wrap.appendChild(el("div","muted","loops whose counts changed: golden vs head (a loop's counts include its inner loops)"));
  data.loops.forEach(function(l){var t=el("table","res loop");var cap=t.createCaption();cap.textContent=l[0];
    var h=t.insertRow();["per iteration","golden","head"].forEach(function(x){h.appendChild(el("th",null,x));});
    l[1].concat(l[2]).forEach(function(r){var tr=t.insertRow();if(r[1]!==r[2])tr.className="moved";
      tr.appendChild(el("td",null,r[0]));tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));});
    wrap.appendChild(t);if(l[3])wrap.appendChild(el("pre","muted",l[3]));});
  return wrap;}
function render(d){
  if(d.dataset.rendered)return;var data=dataOf(d);if(!data)return;d.dataset.rendered="1";
  var body=d.querySelector(".body");
  var info=el("div","muted","instructions "+fmt(data.instructions[0])+" → "+fmt(data.instructions[1])+
    " · golden "+(data.golden||"–")+" · sha256 "+(data.base_sha256?data.base_sha256.slice(0,16):"–")+" → "+
    (data.head_sha256?data.head_sha256.slice(0,16):"–"));
  body.appendChild(info);
  if(data.message)body.appendChild(el(data.message.indexOf("\n")>=0?"pre":"p","message",data.message));
  data.expectations.forEach(function(x){body.appendChild(el("p","problem","expectation failed: "+x));});
  if(data.launch)body.appendChild(el("p",data.verdict==="cannot-launch"?"problem":"muted",data.launch));
  if(data.stages)body.appendChild(el("p","stages",data.stages));
  if(data.verdict==="same"){body.appendChild(el("p","muted","byte-identical to the golden"));}
  var cols=el("div","cols");
  if(data.resources.length)cols.appendChild(renderResources(data));
  if(data.binding.length)cols.appendChild(renderBinding(data));
  if(data.verdict!=="same"&&(data.histogram.length||data.histogram_kind==="delta"))cols.appendChild(renderHistogram(data));
  if(data.loops.length)cols.appendChild(renderLoops(data));
  body.appendChild(cols);
  var side=el("div","side-by-side");
  if(data.source)side.appendChild(renderSource(data.source));
  if(data.diff)side.appendChild(renderDiffs(data));
  else if(data.diff_note)side.appendChild(el("p","muted",data.diff_note));
  body.appendChild(side);
}
function renderSource(src){
  var wrap=el("div","source");
  wrap.appendChild(el("div","muted","kernel source: instructions per line on each target"+
    (src.known?" (change on "+src.this+")":" (the golden has no source-line table)")));
  var t=el("table","res source-lines");var h=t.insertRow();
  ["line","source"].concat(src.targets).concat(["change"]).forEach(function(x){var th=el("th",null,x);
    if(x===src.this)th.className="this";h.appendChild(th);});
  src.rows.forEach(function(r){var tr=t.insertRow();if(r[4])tr.className="chg";
    tr.appendChild(el("td","no",r[0]));tr.appendChild(el("td","code",r[1]));
    r[2].forEach(function(n,i){var td=el("td","num"+(src.targets[i]===src.this?" this":""),n===null?"·":String(n));tr.appendChild(td);});
    tr.appendChild(el("td","what",r[3]?((r[3]>0?"+":"")+r[3]+": "+r[4]):(r[4]||"")));});
  wrap.appendChild(t);return wrap;}
var details=Array.prototype.slice.call(document.querySelectorAll("details.cell-detail"));
details.forEach(function(d){d.addEventListener("toggle",function(){if(d.open)render(d);});if(d.open)render(d);});
function openCell(id,scroll){
  var d=null;for(var i=0;i<details.length;i++){if(details[i].dataset.cell===id){d=details[i];break;}}
  if(!d)return false;var g=d.closest("details.group");if(g)g.open=true;render(d);d.open=true;
  if(scroll)d.scrollIntoView({block:"start"});return true;}
function hashParams(){var out={};(location.hash||"").replace(/^#/,"").split("&").forEach(function(p){
  var i=p.indexOf("=");if(i>0)out[p.slice(0,i)]=decodeURIComponent(p.slice(i+1));});return out;}
function fromHash(){var p=hashParams();
  if(p.filter!==undefined||p.verdict!==undefined){box.value=p.filter||"";sel.value=p.verdict||"";apply();}
  if(p.open)p.open.split(",").forEach(function(id,i){openCell(id,i===0&&p.scroll!=="0");});}
var box=document.getElementById("filter"),sel=document.getElementById("verdict-filter"),shown=document.getElementById("shown");
var rows=Array.prototype.slice.call(document.querySelectorAll("#matrix tbody tr"));
function hasVerdict(list,want){if(!want)return true;if(want==="not-same")return list.some(function(v){return v&&v!=="same";});
  return list.indexOf(want)>=0;}
function apply(){
  var q=box.value.trim().toLowerCase(),want=sel.value,n=0;
  rows.forEach(function(tr){var ok=(!q||tr.textContent.toLowerCase().indexOf(q)>=0||tr.dataset.key.toLowerCase().indexOf(q)>=0||
      Array.prototype.some.call(tr.querySelectorAll("td.cell"),function(td){return td.dataset.cell.toLowerCase().indexOf(q)>=0;}))&&
      hasVerdict(tr.dataset.verdicts.split(" "),want);
    tr.classList.toggle("hidden",!ok);if(ok)n++;});
  var m=0;details.forEach(function(d){var text=d.dataset.cell.toLowerCase();
    var ok=(!q||text.indexOf(q)>=0||(d.dataset.rendered&&d.textContent.toLowerCase().indexOf(q)>=0))&&
      hasVerdict([d.dataset.verdict],want);d.classList.toggle("hidden",!ok);if(ok)m++;});
  shown.textContent=(q||want)?(n+" rows, "+m+" cells shown"):"";
  Array.prototype.forEach.call(document.querySelectorAll(".chip"),function(c){c.classList.toggle("active",c.dataset.verdict===want);});}
box.addEventListener("input",apply);sel.addEventListener("change",apply);
Array.prototype.forEach.call(document.querySelectorAll(".chip"),function(c){c.addEventListener("click",function(){
  sel.value=sel.value===c.dataset.verdict?"":c.dataset.verdict;apply();});});
window.addEventListener("hashchange",fromHash);fromHash();
document.body.dataset.ready="1";
})();
