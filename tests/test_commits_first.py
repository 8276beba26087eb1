"""A worker's processing tries wait while one of its tries commits, for a bounded time."""

import threading

from squall.transactional.batches import CommitsFirst


def _commit_in_thread(commits: CommitsFirst) -> tuple[threading.Event, threading.Event, threading.Thread]:
    began, release = threading.Event(), threading.Event()

    def commit() -> None:
        with commits.running():
            began.set()
            release.wait(30)

    thread = threading.Thread(target=commit)
    thread.start()
    assert began.wait(10)
    return began, release, thread


def test_processing_waits_for_a_running_commit_and_goes_on_when_it_ends():
    commits = CommitsFirst()
    commits.HOLD_SECS = 60
    _, release, committer = _commit_in_thread(commits)
    waited = threading.Event()
    processor = threading.Thread(target=lambda: (commits.wait_for_commits(), waited.set()))
    processor.start()
    processor.join(0.3)
    assert processor.is_alive() and not waited.is_set()  # held while the commit runs
    release.set()
    committer.join(10)
    processor.join(10)
    assert waited.is_set()


def test_a_commit_that_outlasts_the_hold_no_longer_holds_processing_up():
    commits = CommitsFirst()
    commits.HOLD_SECS = 0.0  # a commit waiting on something outside: the others go on at once
    _, release, committer = _commit_in_thread(commits)
    commits.wait_for_commits()  # returns although the commit is still running
    assert committer.is_alive()
    release.set()
    committer.join(10)


def test_no_commit_no_wait():
    CommitsFirst().wait_for_commits()
