"""A job carries its task kind from the moment esgexp/run.make_job makes it; its run's name comes from it."""

from esgexp.run import make_job
from esgexp.tasks.kinds import kind_of
from esgexp.tasks.retrieval import RetrievalJob


def test_a_job_carries_its_kind_from_the_moment_it_is_made(make_cfg):
    job = make_job(make_cfg("experiment=climretrieve_retrieval", "dataset=climretrieve_sample"))
    assert isinstance(job, RetrievalJob) and job.kind is kind_of("retrieval")
    assert job.run_name({"retriever": "bm25", "encoder": "", "query": "question"}) == "bm25/question"
